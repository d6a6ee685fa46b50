package pipeline

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spade-pipeline/spade/pipeline/storage"
)

// Side files are what spade writes into a run outside the tables'
// manifests: the checkpoint files that a checkpoints table row lists by
// key, sha256 and size (<run>/round=NNNNNN/checkpoints/files/...), and
// files kept beside the rounds, such as the evaluations of `spade eval`
// (<run>/evals/...), each followed by a side record of its digest
// (SideRecord). Verify checks both (docs/format.md "Side files").

// SideRecordFormat is the format_version of a side record.
const SideRecordFormat = 1

// SideRecordSuffix ends the key of every side record: the record of the
// file at key K is K + SideRecordSuffix (SideRecordKey).
const SideRecordSuffix = ".record.json"

// SideRecord is written beside a side file, at SideRecordKey of its key,
// once the file is whole (WriteSideFile): what Verify checks the file
// against, since no manifest lists it.
type SideRecord struct {
	// FormatVersion is SideRecordFormat.
	FormatVersion int `json:"format_version"`
	// Round is the round the file belongs to.
	Round int `json:"round"`
	// Writer names what wrote it, e.g. "spade eval".
	Writer string `json:"writer"`
	// File is the file's key, sha256 and size and, for a Parquet file, its
	// row and row group counts (Part is unused).
	File FileEntry `json:"file"`
	// Repair is the command that writes the file again, "" when none does.
	Repair string `json:"repair,omitempty"`
}

// SideRecordKey is the key of the side record of the file at fileKey.
func SideRecordKey(fileKey string) string { return fileKey + SideRecordSuffix }

// WriteSideFile stores data at key, then its side record: rec with
// FormatVersion and File's key, sha256 and size filled in (File.Rows and
// File.RowGroups are kept as given, 0 for a file that is not Parquet).
// Each replaces an earlier object of its key. A reader that finds the
// file without its record (a kill between the two writes, a build before
// records) cannot check its content (Verify lists it as unrecorded).
// Errors: the store's, naming the key.
func WriteSideFile(ctx context.Context, s storage.Store, key string, data []byte, rec SideRecord) error {
	if err := storage.ValidateKey(key); err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	rec.FormatVersion = SideRecordFormat
	rec.File.Key, rec.File.SHA256, rec.File.Bytes = key, hex.EncodeToString(sum[:]), int64(len(data))
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encode side record of %s: %w", key, err)
	}
	if err := s.Put(ctx, key, bytes.NewReader(data), int64(len(data))); err != nil {
		return fmt.Errorf("write %s: %w", key, err)
	}
	rk := SideRecordKey(key)
	if err := storage.PutBytes(ctx, s, rk, append(b, '\n')); err != nil {
		return fmt.Errorf("write %s: %w", rk, err)
	}
	return nil
}

// ReadSideRecord reads the side record of the file at fileKey; nil and no
// error when there is none. Errors: the store's; a record that does not
// decode, has another format version, or names another file (each
// wrapping ErrIntegrity and naming the record's key).
func ReadSideRecord(ctx context.Context, s storage.Store, fileKey string) (*SideRecord, error) {
	rk := SideRecordKey(fileKey)
	data, err := storage.ReadAll(ctx, s, rk)
	if isNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", rk, err)
	}
	return decodeSideRecord(rk, data)
}

// decodeSideRecord decodes the side record stored at rk.
func decodeSideRecord(rk string, data []byte) (*SideRecord, error) {
	var rec SideRecord
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return nil, fmt.Errorf("%s: %w: not a side record: %v", rk, ErrIntegrity, err)
	}
	if rec.FormatVersion != SideRecordFormat {
		return nil, fmt.Errorf("%s: %w: side record format_version %d, this build reads %d", rk, ErrIntegrity, rec.FormatVersion, SideRecordFormat)
	}
	if want := strings.TrimSuffix(rk, SideRecordSuffix); rec.File.Key != want {
		return nil, fmt.Errorf("%s: %w: the record names file %q, not %q", rk, ErrIntegrity, rec.File.Key, want)
	}
	if len(rec.File.SHA256) != 64 || strings.Trim(rec.File.SHA256, "0123456789abcdef") != "" || rec.File.Bytes < 0 {
		return nil, fmt.Errorf("%s: %w: malformed sha256 %q or size %d", rk, ErrIntegrity, rec.File.SHA256, rec.File.Bytes)
	}
	return &rec, nil
}

// checkBlob reads the object at key as a stream and says what is wrong
// with it against the sha256 and size that by (a record, a table row)
// gives, "" when it matches; missing reports whether it is absent.
// Errors: the store's, other than a missing object.
func checkBlob(ctx context.Context, s storage.Store, key, sum string, size int64, by string) (problem string, missing bool, err error) {
	rc, err := s.Get(ctx, key)
	if isNotFound(err) {
		return fmt.Sprintf("%s: %v: file missing, but %s lists it", key, ErrIntegrity, by), true, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read %s: %w", key, err)
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, rc)
	if isNotFound(err) {
		return fmt.Sprintf("%s: %v: file missing, but %s lists it", key, ErrIntegrity, by), true, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read %s: %w", key, err)
	}
	if n != size {
		return fmt.Sprintf("%s: %v: %d bytes, %s says %d", key, ErrIntegrity, n, by, size), false, nil
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != sum {
		return fmt.Sprintf("%s: %v: sha256 %s, %s says %s", key, ErrIntegrity, short(got), by, short(sum)), false, nil
	}
	return "", false, nil
}

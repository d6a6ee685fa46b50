// Package pipeline moves data: the run/round/table layout in a store, the
// manifest and commit protocol, stage fingerprints, and the runner that
// executes a round's stage DAG with resume (DESIGN.md; the storage format
// is specified in docs/format.md).
package pipeline

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/spade-pipeline/spade/pipeline/storage"
)

// FormatVersion is the storage-format version written in every manifest,
// round seal and run file. Readers refuse other versions.
const FormatVersion = 1

// Sentinel errors the CLI maps to exit codes (docs/cli.md).
var (
	// ErrConflict: something different is already committed where this
	// invocation would commit (exit code 3).
	ErrConflict = errors.New("conflict with committed data")
	// ErrUnknownVersion: a manifest or seal of a format version this build
	// does not read.
	ErrUnknownVersion = errors.New("unknown storage format version")
	// ErrIntegrity: a stored file does not match its manifest (sha256 or size).
	ErrIntegrity = errors.New("integrity check failed")
	// ErrNotCommitted: a table, round or run that was asked for is not committed.
	ErrNotCommitted = errors.New("not committed")
	// ErrBusy: another process holds the run's lease (exit code 4).
	ErrBusy = errors.New("run is busy")
)

// FileEntry is one data file a manifest lists. Key is relative to the store
// root (a fork's manifests point into the source run).
type FileEntry struct {
	// Key is the Parquet file's store key,
	// <run>/round=NNNNNN/<table>/part-PPPPP-of-NNNNN-<sha256[:16]>.parquet.
	Key string `json:"key"`
	// SHA256 is the hex sha256 of the file's bytes, checked on every read.
	SHA256 string `json:"sha256"`
	// Bytes is the file's size in bytes.
	Bytes int64 `json:"bytes"`
	// Rows is the number of rows in the file.
	Rows int64 `json:"rows"`
	// RowGroups is the number of Parquet row groups in the file (8,192
	// rows each, the last one shorter).
	RowGroups int64 `json:"row_groups"`
	// Part is the file's part index; parts are listed in order.
	Part int `json:"part"`
}

// InputRef names one input manifest of a stage and pins its content digest.
type InputRef struct {
	// Table is the input table's name.
	Table string `json:"table"`
	// Round is the input table version's round.
	Round int `json:"round"`
	// Key is the input's manifest key (ManifestKey).
	Key string `json:"key"`
	// Digest is the input's content digest (Manifest.ContentDigest), or
	// "absent" for an optional input that is not committed.
	Digest string `json:"digest"`
}

// Manifest is the commit record of one table version (run, round, table):
// the only commit point (DESIGN.md "Commit protocol").
type Manifest struct {
	// FormatVersion is the storage-format version, FormatVersion (1);
	// DecodeManifest refuses others.
	FormatVersion int `json:"format_version"`
	// Run is the run the table version belongs to (a fork's manifest names
	// the fork).
	Run string `json:"run"`
	// Round is the table version's round.
	Round int `json:"round"`
	// Table is the table's name, e.g. "rollouts" or "design_calls".
	Table string `json:"table"`
	// Kind is the table's schema name in the schemas registry (e.g.
	// "llm_calls" for design_calls).
	Kind string `json:"kind"`
	// SchemaVersion is the version of Kind's schema.
	SchemaVersion int `json:"schema_version"`
	// SchemaFingerprint is the hex sha256 of the schema's name, version and
	// Parquet schema text (schemas.Info.Fingerprint).
	SchemaFingerprint string `json:"schema_fingerprint"`
	// Stage is the name of the stage that wrote the table.
	Stage string `json:"stage"`
	// StageFingerprint is the stage's fingerprint for this round
	// (docs/format.md "Stage fingerprint"); a rerun with the same one is
	// skipped, with another one refused.
	StageFingerprint string `json:"stage_fingerprint"`
	// ConfigDigest is the run's config digest (config.Config.Digest: hex
	// sha256 of the pinned config's canonical JSON).
	ConfigDigest string `json:"config_digest"`
	// Seed is the run seed.
	Seed int64 `json:"seed"`
	// Files lists the data files, in part order; empty when the stage
	// emitted no rows.
	Files []FileEntry `json:"files"`
	// Rows is the table's row count, the sum over Files (checked on
	// decode).
	Rows int64 `json:"rows"`
	// Bytes is the table's size in bytes, the sum over Files (checked on
	// decode).
	Bytes int64 `json:"bytes"`
	// Inputs are the stage's input table versions, pinned by content
	// digest, in the order the stage's Plan lists them.
	Inputs []InputRef `json:"inputs"`
	// CodeVersion identifies the build that wrote the table (CodeVersion:
	// module version, or VCS revision with "+dirty").
	CodeVersion string `json:"code_version"`
	// Libraries maps "go" and the modules that shape stored bytes
	// (parquet-go, aws-sdk-go-v2, openai-go) to their versions (Libraries).
	Libraries map[string]string `json:"libraries"`
	// ReferenceOf is set when the table is carried forward by reference: the
	// manifest key whose files this one lists.
	ReferenceOf string `json:"reference_of,omitempty"`
	// CreatedAt and Stats are observations, outside every digest. CreatedAt
	// is the commit time (UTC).
	CreatedAt time.Time `json:"created_at"`
	// Stats holds the commit's observations: stage_seconds, parts, and the
	// counts and notes the stage's parts reported (Out.Stat).
	Stats map[string]any `json:"stats,omitempty"`
}

// ContentDigest is the hex sha256 over the table's data: schema fingerprint
// and every file's sha256 and row count, in part order. Two table versions
// with the same content digest hold the same rows in the same bytes,
// whatever run, round, code version or time made them. It is what round
// seals, spade diff and golden tests compare.
func (m *Manifest) ContentDigest() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", m.SchemaFingerprint)
	for _, f := range m.Files {
		fmt.Fprintf(h, "%s %d\n", f.SHA256, f.Rows)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Encode returns the manifest as indented JSON.
func (m *Manifest) Encode() []byte {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		panic("pipeline: encode manifest: " + err.Error())
	}
	return append(b, '\n')
}

// DecodeManifest parses a manifest read from key. It refuses unknown format
// versions (ErrUnknownVersion) and malformed JSON, naming the key.
func DecodeManifest(key string, data []byte) (*Manifest, error) {
	var probe struct {
		FormatVersion *int `json:"format_version"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return nil, fmt.Errorf("manifest %s: malformed JSON: %w", key, err)
	}
	if probe.FormatVersion == nil {
		return nil, fmt.Errorf("manifest %s: field format_version missing", key)
	}
	if *probe.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("manifest %s: %w %d (this build reads %d)", key, ErrUnknownVersion, *probe.FormatVersion, FormatVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", key, err)
	}
	if m.Table == "" {
		return nil, fmt.Errorf("manifest %s: field table missing", key)
	}
	var rows, size int64
	for i, f := range m.Files {
		if err := storage.ValidateKey(f.Key); err != nil {
			return nil, fmt.Errorf("manifest %s: files[%d].key: %w", key, i, err)
		}
		if len(f.SHA256) != 64 {
			return nil, fmt.Errorf("manifest %s: files[%d].sha256: not a hex sha256", key, i)
		}
		rows += f.Rows
		size += f.Bytes
	}
	if rows != m.Rows || size != m.Bytes {
		return nil, fmt.Errorf("manifest %s: rows/bytes totals (%d, %d) do not match its files (%d, %d)", key, m.Rows, m.Bytes, rows, size)
	}
	return &m, nil
}

// ReadManifest reads and decodes the manifest at key. A missing manifest
// returns an error wrapping storage.ErrNotFound.
func ReadManifest(ctx context.Context, s storage.Store, key string) (*Manifest, error) {
	data, err := storage.ReadAll(ctx, s, key)
	if err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", key, err)
	}
	return DecodeManifest(key, data)
}

// CodeVersion identifies the running build: the module version, or the VCS
// revision (with "+dirty" for modified trees) when built from a checkout.
func CodeVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev != "" && (v == "" || v == "(devel)") {
		v = rev
		if modified == "true" {
			v += "+dirty"
		}
	}
	if v == "" {
		v = "(devel)"
	}
	return v
}

// Libraries returns the versions of the libraries that shape stored bytes.
func Libraries() map[string]string {
	out := map[string]string{}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return out
	}
	out["go"] = bi.GoVersion
	for _, d := range bi.Deps {
		for _, want := range []string{"github.com/parquet-go/parquet-go", "github.com/aws/aws-sdk-go-v2", "github.com/openai/openai-go/v3"} {
			if d.Path == want {
				out[d.Path] = d.Version
			}
		}
	}
	return out
}

// Layout helpers: every key of a run (docs/format.md).

// RunKey is the run's root prefix.
func RunKey(run string) string { return run }

// RunFileKey is the key of the run's _RUN.json.
func RunFileKey(run string) string { return run + "/_RUN.json" }

// RoundDir is the key prefix of round r: "<run>/round=000003".
func RoundDir(run string, r int) string { return fmt.Sprintf("%s/round=%06d", run, r) }

// TableDir is the key prefix of one table version.
func TableDir(run string, r int, table string) string { return RoundDir(run, r) + "/" + table }

// ManifestKey is the key of one table version's manifest.
func ManifestKey(run string, r int, table string) string {
	return TableDir(run, r, table) + "/_manifest.json"
}

// SealKey is the key of round r's seal.
func SealKey(run string, r int) string { return RoundDir(run, r) + "/_ROUND.json" }

// PartKey is the content-named key of one part file.
func PartKey(run string, r int, table string, part, parts int, sha string) string {
	return fmt.Sprintf("%s/part-%05d-of-%05d-%s.parquet", TableDir(run, r, table), part, parts, sha[:16])
}

// PendingKey is the key of a part record: the proof that part p of a stage
// with the given fingerprint was written (sharded commits, resume).
func PendingKey(run string, r int, stage, fingerprint string, part int) string {
	return fmt.Sprintf("%s/_pending/%s-%s/part-%05d.json", RoundDir(run, r), stage, fingerprint[:16], part)
}

// MaxRunNameBytes is the longest run name accepted, in bytes.
const MaxRunNameBytes = 128

// ValidateRunName checks a run name: 1 to MaxRunNameBytes letters, digits,
// '-', '_', '.', not starting with '.', '_' or '-' (a name starting with
// '-' reads as a flag in shell commands).
func ValidateRunName(run string) error {
	if len(run) > MaxRunNameBytes {
		return fmt.Errorf("invalid run name %.40q...: %d bytes, at most %d", run, len(run), MaxRunNameBytes)
	}
	if run == "" || strings.HasPrefix(run, ".") || strings.HasPrefix(run, "_") || strings.HasPrefix(run, "-") {
		return fmt.Errorf("invalid run name %q: use letters, digits, '-', '_' and '.', not starting with '.', '_' or '-'", run)
	}
	for _, c := range run {
		if !validRunChar(c) {
			return fmt.Errorf("invalid run name %q: character %q not allowed", run, c)
		}
	}
	return nil
}

func validRunChar(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

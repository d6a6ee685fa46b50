// Package pipeline moves data: the run/round/table layout in a store, the
// manifest and commit protocol, stage fingerprints, and the runner that
// executes a round's stage DAG with resume (docs/design.md; the storage format
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

	"github.com/sourcegraph/conc/pool"

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
// the only commit point (docs/design.md "Commit protocol").
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

// chainReads is how many seals or manifests VerifyChain reads at once.
const chainReads = 16

// VerifyChain checks that rounds 0..last of run form the chain a round
// last+1 builds on. It reads every seal of rounds 0..last and every
// manifest they list (small JSON objects, chainReads at a time) and checks,
// for each round r: the seal exists, decodes and says round r; its parent
// is the round id (Seal.Digest) of round r-1's seal, or "" for round 0;
// its tables and manifests name the same tables; and each table's manifest,
// at ManifestKey(run, r, table) (the key readers use, which the seal must
// list), exists, decodes (DecodeManifest: format version, rows and bytes
// totals equal to the sums over its files), names round r and the table,
// and has the content digest the seal records.
//
// The first failure, by round and then by table name, is returned. It names
// the file and what disagrees and wraps ErrIntegrity; a seal or manifest of
// another format version wraps ErrUnknownVersion instead; a missing seal of
// round last itself wraps ErrNotCommitted. Storage errors other than a
// missing object are returned as they are. last < 0 checks nothing.
func VerifyChain(ctx context.Context, s storage.Store, run string, last int) error {
	if last < 0 {
		return nil
	}
	seals := make([]*Seal, last+1)
	errs := make([]error, last+1)
	p := pool.New().WithMaxGoroutines(chainReads)
	for r := range seals {
		p.Go(func() { seals[r], errs[r] = readChainSeal(ctx, s, run, r) })
	}
	p.Wait()
	if isNotFound(errs[last]) {
		return fmt.Errorf("round %d of run %s: %w (no %s)", last, run, ErrNotCommitted, SealKey(run, last))
	}
	type check struct {
		r     int
		table string
	}
	var checks []check
	for r, seal := range seals {
		key := SealKey(run, r)
		if isNotFound(errs[r]) {
			return fmt.Errorf("%s is missing, but round %d is sealed: %w; if the manifests of round %d are intact, spade round %d writes it again", key, last, ErrIntegrity, r, r)
		}
		if errs[r] != nil {
			return errs[r]
		}
		if seal.Round != r {
			return fmt.Errorf("%s: %w: it says round %d", key, ErrIntegrity, seal.Round)
		}
		want := ""
		if r > 0 {
			want = seals[r-1].Digest()
		}
		if seal.Parent != want {
			if r == 0 {
				return fmt.Errorf("%s: %w: round 0 has parent %.12s, want none", key, ErrIntegrity, seal.Parent)
			}
			return fmt.Errorf("%s: %w: parent %.12s is not the round id %.12s of %s", key, ErrIntegrity, seal.Parent, want, SealKey(run, r-1))
		}
		for _, table := range sortedKeys(seal.Tables) {
			if mk, ok := seal.Manifests[table]; !ok {
				return fmt.Errorf("%s: %w: table %s has a content digest but no manifest", key, ErrIntegrity, table)
			} else if mk != ManifestKey(run, r, table) {
				return fmt.Errorf("%s: %w: table %s's manifest is listed as %s, want %s", key, ErrIntegrity, table, mk, ManifestKey(run, r, table))
			}
			checks = append(checks, check{r, table})
		}
		for _, table := range sortedKeys(seal.Manifests) {
			if _, ok := seal.Tables[table]; !ok {
				return fmt.Errorf("%s: %w: table %s has a manifest but no content digest", key, ErrIntegrity, table)
			}
		}
	}
	merrs := make([]error, len(checks))
	p = pool.New().WithMaxGoroutines(chainReads)
	for i, c := range checks {
		p.Go(func() { merrs[i] = checkSealedManifest(ctx, s, run, seals[c.r], c.table) })
	}
	p.Wait()
	for _, err := range merrs {
		if err != nil {
			return err
		}
	}
	return nil
}

// readChainSeal reads and decodes round r's seal for VerifyChain: a missing
// seal gives the store's not-found error; a malformed one ErrIntegrity.
func readChainSeal(ctx context.Context, s storage.Store, run string, r int) (*Seal, error) {
	key := SealKey(run, r)
	data, err := storage.ReadAll(ctx, s, key)
	if err != nil {
		return nil, err
	}
	var seal Seal
	if err := json.Unmarshal(data, &seal); err != nil {
		return nil, fmt.Errorf("%s: %w: malformed JSON: %w", key, ErrIntegrity, err)
	}
	if seal.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("%s: %w %d (this build reads %d)", key, ErrUnknownVersion, seal.FormatVersion, FormatVersion)
	}
	return &seal, nil
}

// CheckSealedManifests checks, without reading anything, that the
// manifests ms of seal's round (by table, as Runner.TableManifests returns
// them) are the ones the seal records: every table the seal lists has a
// manifest that says that round and table and has the content digest it
// records. A disagreement (a hand edit of a manifest or a seal, a partial
// restore, a manifest copied from another table) wraps ErrIntegrity and
// names the manifest (and the seal).
func CheckSealedManifests(run string, seal *Seal, ms map[string]*Manifest) error {
	for _, table := range sortedKeys(seal.Tables) {
		m, ok := ms[table]
		if !ok {
			return fmt.Errorf("%s, listed in %s, is missing: %w", ManifestKey(run, seal.Round, table), SealKey(run, seal.Round), ErrIntegrity)
		}
		if err := matchSeal(run, seal, table, m); err != nil {
			return err
		}
	}
	return nil
}

// MatchSeal checks, without reading anything, that m, read as table's
// manifest of seal's round, says that round and table and has the content
// digest the seal records; a mismatch (a hand edit, files swapped with the
// totals fixed) wraps ErrIntegrity and names the manifest and the seal.
// spade sql applies it to each manifest of a sealed round it opens.
func MatchSeal(run string, seal *Seal, table string, m *Manifest) error {
	return matchSeal(run, seal, table, m)
}

// matchSeal checks that m, read as table's manifest of seal's round, says
// that round and table and has the content digest the seal records; a
// mismatch wraps ErrIntegrity and names the manifest (and the seal).
func matchSeal(run string, seal *Seal, table string, m *Manifest) error {
	key := ManifestKey(run, seal.Round, table)
	if m.Round != seal.Round || m.Table != table {
		return fmt.Errorf("%s: %w: it says round %d, table %s", key, ErrIntegrity, m.Round, m.Table)
	}
	if d := m.ContentDigest(); d != seal.Tables[table] {
		return fmt.Errorf("%s: %w: content digest %.12s, but %s records %.12s for table %s", key, ErrIntegrity, d, SealKey(run, seal.Round), seal.Tables[table], table)
	}
	return nil
}

// checkSealedManifest checks that table's manifest in seal's round decodes
// and has the content digest the seal records.
func checkSealedManifest(ctx context.Context, s storage.Store, run string, seal *Seal, table string) error {
	sealKey := SealKey(run, seal.Round)
	key := ManifestKey(run, seal.Round, table)
	data, err := storage.ReadAll(ctx, s, key)
	if isNotFound(err) {
		return fmt.Errorf("%s, listed in %s, is missing: %w", key, sealKey, ErrIntegrity)
	}
	if err != nil {
		return err
	}
	m, err := DecodeManifest(key, data)
	if errors.Is(err, ErrUnknownVersion) {
		return fmt.Errorf("%w (listed in %s)", err, sealKey)
	}
	if err != nil {
		return fmt.Errorf("%w: %w (listed in %s)", err, ErrIntegrity, sealKey)
	}
	return matchSeal(run, seal, table, m)
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

// ValidateRunName checks a run name: 1 to MaxRunNameBytes ASCII letters,
// digits, '-', '_', '.', not starting with '.', '_' or '-' (a name
// starting with '-' reads as a flag in shell commands). It returns nil for
// a valid name, else an error quoting the name (its first 40 bytes when
// too long) and saying which rule it breaks: its length, its first
// character, or the first character not allowed.
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

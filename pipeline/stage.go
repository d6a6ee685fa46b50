package pipeline

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/internal/parallel"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/table"
	"github.com/spade-pipeline/spade/schemas"
)

// RoundInfo describes round r of a run to the stages planning it.
type RoundInfo struct {
	// Run is the run's name.
	Run string
	// Round is the round number: 0 is the setup round holding the corpus,
	// each round >= 1 one GRPO step.
	Round int
	// Regeneration is true when the round generates new environments:
	// (Round-1) % regenerate_every == 0 (docs/method.md step 8); never under
	// design.mode fixed_pool.
	Regeneration bool
	// RegenRound is the round of the latest regeneration at or before
	// Round; under design.mode fixed_pool, 0 (the round the imported pool
	// was committed at).
	RegenRound int
	// RegenIndex numbers regenerations from 0 (0 under design.mode
	// fixed_pool).
	RegenIndex int
	// Seed is the run seed.
	Seed int64
}

// NewRoundInfo computes the schedule of round r (r >= 1; round 0 is the
// run's setup round holding the corpus, and under design.mode fixed_pool
// the imported pool). Under fixed_pool no round regenerates: every round
// is a pool round, whose pool stage carries pool(r-1) forward.
func NewRoundInfo(run string, r int, cfg *config.Config) RoundInfo {
	ri := RoundInfo{Run: run, Round: r, Seed: cfg.Seed}
	if r >= 1 && !cfg.FixedPool() {
		k := cfg.RegenerateEvery
		ri.Regeneration = (r-1)%k == 0
		ri.RegenRound = r - (r-1)%k
		ri.RegenIndex = (r - 1) / k
	}
	return ri
}

// Input names one table version a stage reads.
type Input struct {
	// Table is the table's name.
	Table string
	// Round is the round of the table version read (the current round, an
	// earlier one such as r-1, or 0 for the corpus).
	Round int
	// Optional inputs may be missing (e.g. memory before the first round).
	Optional bool
}

// Output names one table a stage writes and its kind (schemas table name);
// Kind defaults to Table.
type Output struct {
	// Table is the table's name, unique in a round.
	Table string
	// Kind is the table's schema name in the schemas registry ("" means
	// Table).
	Kind string
}

// KindOf returns the output's table kind.
func (o Output) KindOf() string {
	if o.Kind == "" {
		return o.Table
	}
	return o.Kind
}

// Stage is one step of a round: SPADE logic only. The runner owns
// fingerprints, commit, resume, progress and logs (docs/design.md "Stages").
//
// A stage's work is split into Parts independent parts; part p's output is
// a pure function of the inputs, the config subset, the seed and p, so any
// assignment of parts to shards gives byte-identical tables.
type Stage interface {
	// Name is the stage name used by the CLI and in manifests.
	Name() string
	// Outputs lists the tables the stage writes.
	Outputs() []Output
	// Plan returns the inputs the stage reads at this round and whether the
	// stage runs at all this round.
	Plan(ri RoundInfo, cfg *config.Config) (inputs []Input, runs bool)
	// ConfigSubset is the part of the config the stage's output depends on;
	// it is hashed into the stage fingerprint. cfg is the pinned config
	// (config.Config.Pinned: the Operational settings are zero), so a run
	// resumes with other workers, timeouts or programs per sandbox.
	ConfigSubset(cfg *config.Config) any
	// Parts returns the number of parts for these inputs (>= 1).
	Parts(ctx context.Context, env *Env) (int, error)
	// Run computes part p and emits its rows to out.
	Run(ctx context.Context, env *Env, part int, out *Out) error
}

// PartsInFlight is implemented by stages whose parts mostly wait on a
// model server (docs/design.md "Model calls in flight": model calls are bounded by model.concurrency,
// not by the CPU count): the runner runs up to PartsInFlight(cfg) of their
// parts at once when that is more than workers, so that the parts in
// flight hold enough model calls between them. It never changes what a
// part computes.
type PartsInFlight interface {
	PartsInFlight(cfg *config.Config) int
}

// Serving is implemented by a stage whose parts call a model that must be
// the round's policy (design, hint, rollout: docs/design.md "The policy of a
// round, and who serves it"). The runner calls Serve once before the
// stage's parts run in this invocation (not when every part of the shard
// is already done) and the returned stop after they ended, whatever
// their outcome: a server started for the stage never outlives it. An
// error from Serve fails the stage before any part runs.
type Serving interface {
	Serve(ctx context.Context, env *Env) (stop func(), err error)
}

// Env is what a running stage sees: the round, the config, and its inputs
// (by manifest; rows are read through ReadAll and friends).
type Env struct {
	// Round is the round being computed.
	Round RoundInfo
	// Config is the run's config, shared with the runner and every stage.
	Config *config.Config
	// Stage is the running stage's name.
	Stage     string
	store     storage.Store
	inputs    map[string]*Manifest // key: "table@round"
	inputRefs []InputRef
}

func inputKey(table string, round int) string { return fmt.Sprintf("%s@%d", table, round) }

// Manifest returns the manifest of input table at round, or nil when the
// input is optional and missing.
func (e *Env) Manifest(table string, round int) *Manifest {
	return e.inputs[inputKey(table, round)]
}

// Has reports whether the optional input exists.
func (e *Env) Has(table string, round int) bool { return e.Manifest(table, round) != nil }

// Store returns the store, for stages that keep large artefacts (model
// checkpoints) beside their tables.
func (e *Env) Store() storage.Store { return e.store }

// ReadAll reads every row of input table at round, verifying each file's
// size and sha256 against the manifest (ErrIntegrity on mismatch). A missing
// optional input gives no rows.
func ReadAll[T any](ctx context.Context, e *Env, t schemas.Table[T], name string, round int) ([]T, error) {
	m := e.Manifest(name, round)
	if m == nil {
		if _, declared := e.inputs[inputKey(name, round)]; declared {
			return nil, nil
		}
		return nil, fmt.Errorf("stage %s: %s of round %d is not a declared input", e.Stage, name, round)
	}
	return ReadManifestRows(ctx, e.store, t, m)
}

// readFilesAtOnce bounds how many of a manifest's files ReadManifestRows
// reads and decodes at the same time: it overlaps storage latency (one GET
// per file on S3) and decoding, and holds at most this many raw files (and
// their row groups being decoded) in memory.
const readFilesAtOnce = 4

// ReadManifestRows reads every row of the files m lists, in part order,
// verifying sizes and sha256. Files are read and decoded concurrently (at
// most readFilesAtOnce at a time, each decoded by table.Decode's own
// workers); on failure the error is that of the lowest-numbered bad file,
// whatever the scheduling, and files after it that have not started by
// then are not read.
func ReadManifestRows[T any](ctx context.Context, s storage.Store, t schemas.Table[T], m *Manifest) ([]T, error) {
	if err := checkKind(t, m); err != nil {
		return nil, err
	}
	parts := make([][]T, len(m.Files))
	err := parallel.Each(len(m.Files), readFilesAtOnce, func(i int) error {
		data, err := ReadVerified(ctx, s, m.Files[i])
		if err == nil {
			parts[i], _, err = table.Decode(t, m.Files[i].Key, data)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	n := 0
	for _, rows := range parts {
		n += len(rows)
	}
	if n == 0 {
		return nil, nil
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	out := make([]T, 0, n)
	for _, rows := range parts {
		out = append(out, rows...)
	}
	return out, nil
}

// checkKind returns an error naming m's table and round when m's kind or
// schema fingerprint is not t's.
func checkKind[T any](t schemas.Table[T], m *Manifest) error {
	if m.Kind != "" && m.Kind != t.Name {
		return fmt.Errorf("table %s round %d is of kind %s, not %s", m.Table, m.Round, m.Kind, t.Name)
	}
	if m.SchemaFingerprint != t.Fingerprint() {
		return fmt.Errorf("table %s round %d: schema fingerprint %s does not match this build's %s v%d", m.Table, m.Round, short(m.SchemaFingerprint), t.Name, t.Version)
	}
	return nil
}

// ScanAll calls fn with the rows of each file of input table at round, in
// part order, one file in memory at a time: for a stage that needs a
// summary of a large table (the calls tables hold every request and
// response), not its rows. Files are verified as ReadAll verifies them. A
// missing optional input calls fn never. Errors: those of ReadAll, and
// fn's, returned unwrapped; files after a failure are not read.
func ScanAll[T any](ctx context.Context, e *Env, t schemas.Table[T], name string, round int, fn func(rows []T) error) error {
	m := e.Manifest(name, round)
	if m == nil {
		if _, declared := e.inputs[inputKey(name, round)]; declared {
			return nil
		}
		return fmt.Errorf("stage %s: %s of round %d is not a declared input", e.Stage, name, round)
	}
	return ScanManifestRows(ctx, e.store, t, m, fn)
}

// ScanManifestRows is ScanAll over the files m lists, for a reader outside
// a stage (spade report summarises each round's rollouts): fn gets the
// rows of one file at a time, in part order, each file verified as
// ReadManifestRows verifies it. Errors: m's kind or schema fingerprint not
// t's (naming the table and round), the errors of ReadVerified and
// table.Decode, and fn's, returned unwrapped; files after a failure are
// not read.
func ScanManifestRows[T any](ctx context.Context, s storage.Store, t schemas.Table[T], m *Manifest, fn func(rows []T) error) error {
	if err := checkKind(t, m); err != nil {
		return err
	}
	for _, f := range m.Files {
		data, err := ReadVerified(ctx, s, f)
		if err != nil {
			return err
		}
		rows, _, err := table.Decode(t, f.Key, data)
		if err != nil {
			return err
		}
		if err := fn(rows); err != nil {
			return err
		}
	}
	return nil
}

// ReadVerified reads one data file and checks its size (bytes) and sha256
// against f. A missing file is an integrity error naming the key that
// wraps both ErrIntegrity and storage.ErrNotFound (a manifest or record
// lists it); another read error (ctx.Err(), ...) is wrapped as "read
// <key>"; a size or digest that differs from f gives an error naming the
// key and wrapping ErrIntegrity.
func ReadVerified(ctx context.Context, s storage.Store, f FileEntry) ([]byte, error) {
	data, err := storage.ReadAll(ctx, s, f.Key)
	if isNotFound(err) {
		return nil, fmt.Errorf("%s: %w: file missing (%w)", f.Key, ErrIntegrity, err)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", f.Key, err)
	}
	if int64(len(data)) != f.Bytes {
		return nil, fmt.Errorf("%s: %w: %d bytes, manifest says %d", f.Key, ErrIntegrity, len(data), f.Bytes)
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != f.SHA256 {
		return nil, fmt.Errorf("%s: %w: sha256 %s, manifest says %s", f.Key, ErrIntegrity, short(got), short(f.SHA256))
	}
	return data, nil
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

// Out collects one part's rows per output table.
type Out struct {
	mu       sync.Mutex
	declared map[string]string // table -> kind
	tables   map[string]encoder
	refs     map[string]*Manifest
	stats    map[string]any
}

type encoder interface {
	encode() (data []byte, rows int64, rowGroups int64, err error)
	len() int
}

type rowsOf[T any] struct {
	t    schemas.Table[T]
	rows []T
}

func (r *rowsOf[T]) len() int { return len(r.rows) }

func (r *rowsOf[T]) encode() ([]byte, int64, int64, error) {
	data, err := table.Encode(r.t, r.rows)
	if err != nil {
		return nil, 0, 0, err
	}
	groups := (int64(len(r.rows)) + table.RowGroupRows - 1) / table.RowGroupRows
	return data, int64(len(r.rows)), groups, nil
}

func newOut(outputs []Output) *Out {
	o := &Out{declared: map[string]string{}, tables: map[string]encoder{}, refs: map[string]*Manifest{}, stats: map[string]any{}}
	for _, d := range outputs {
		o.declared[d.Table] = d.KindOf()
	}
	return o
}

// Emit appends rows to output table name of kind t. It is safe for
// concurrent use. Emitting to an undeclared table or with the wrong kind
// panics: that is a bug in the stage, not bad input.
func Emit[T any](o *Out, t schemas.Table[T], name string, rows ...T) {
	o.mu.Lock()
	defer o.mu.Unlock()
	kind, ok := o.declared[name]
	if !ok || kind != t.Name {
		panic(fmt.Sprintf("pipeline: emit to %s (kind %s) not declared by the stage", name, t.Name))
	}
	enc, ok := o.tables[name]
	if !ok {
		enc = &rowsOf[T]{t: t}
		o.tables[name] = enc
	}
	ro := enc.(*rowsOf[T])
	ro.rows = append(ro.rows, rows...)
}

// Reference commits output table name as a reference to an input manifest:
// the same files, nothing copied (pool and memory carried forward between
// regenerations; fork). Only valid in a stage with one part.
func (o *Out) Reference(name string, m *Manifest) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.declared[name]; !ok {
		panic("pipeline: reference to undeclared output " + name)
	}
	o.refs[name] = m
}

// Stat records an observation (a count, a duration) in the manifests'
// stats, outside every digest.
func (o *Out) Stat(name string, v any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.stats[name] = v
}

// putFile stores data content-named under the table directory and returns
// its entry. A file of that name left by an earlier attempt is written
// again (an atomic replacement by the same bytes): that repairs one
// damaged since (bit rot, a hand edit) and gives it this attempt's
// modification time, so that gc's grace period counts from the attempt
// that records it, not from the one that was killed.
func putFile(ctx context.Context, s storage.Store, run string, round int, tableName string, part, parts int, data []byte, rows, groups int64) (FileEntry, error) {
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	key := PartKey(run, round, tableName, part, parts, sha)
	fe := FileEntry{Key: key, SHA256: sha, Bytes: int64(len(data)), Rows: rows, RowGroups: groups, Part: part}
	err := s.PutIfAbsent(ctx, key, bytes.NewReader(data), int64(len(data)))
	if isExists(err) {
		err = s.Put(ctx, key, bytes.NewReader(data), int64(len(data)))
	}
	if err != nil {
		return FileEntry{}, fmt.Errorf("write %s: %w", key, err)
	}
	return fe, nil
}

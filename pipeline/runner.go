package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/schemas"
)

func isExists(err error) bool { return errors.Is(err, storage.ErrExists) }

func isNotFound(err error) bool { return errors.Is(err, storage.ErrNotFound) }

// RunFile is the content of <run>/_RUN.json: the run's pinned config.
type RunFile struct {
	// FormatVersion is the storage-format version, FormatVersion (1);
	// readers refuse others.
	FormatVersion int `json:"format_version"`
	// Run is the run's name.
	Run string `json:"run"`
	// ConfigDigest is Config's digest (config.Config.Digest); invoking the
	// run with a config of another digest is refused (ErrConflict).
	ConfigDigest string `json:"config_digest"`
	// Config is the run's full config, operational settings included as
	// they were at creation.
	Config config.Config `json:"config"`
	// ForkOf names the source run of a fork ("" otherwise).
	ForkOf string `json:"fork_of,omitempty"`
	// ForkRound is the last round a fork shares with ForkOf (0, and
	// omitted, otherwise).
	ForkRound int `json:"fork_round,omitempty"`
	// CodeVersion identifies the build that created the run (CodeVersion).
	CodeVersion string `json:"code_version"`
	// CreatedAt is when the run file was written (UTC; an observation).
	CreatedAt time.Time `json:"created_at"`
}

// Seal is the content of a round's _ROUND.json: each table's content
// digest and the parent round's seal digest, a hash chain whose head is the
// round id (docs/design.md "Round seal").
type Seal struct {
	// FormatVersion is the storage-format version, FormatVersion (1);
	// readers refuse others.
	FormatVersion int `json:"format_version"`
	// Run is the run's name.
	Run string `json:"run"`
	// Round is the sealed round.
	Round int `json:"round"`
	// Parent is the Digest of round Round-1's seal ("" for round 0).
	Parent string `json:"parent"`
	// Tables maps each table of the round to its content digest
	// (Manifest.ContentDigest).
	Tables map[string]string `json:"tables"`
	// Manifests maps each table to its manifest key.
	Manifests map[string]string `json:"manifests"`
	// CreatedAt is when the seal was written (UTC; an observation, outside
	// Digest).
	CreatedAt time.Time `json:"created_at"`
}

// Digest is the round id: sha256 over the parent digest and the sorted
// table digests (CreatedAt excluded).
func (s *Seal) Digest() string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n", s.Parent)
	for _, k := range sortedKeys(s.Tables) {
		fmt.Fprintf(h, "%s %s\n", k, s.Tables[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Runner executes stages of one run against one store.
type Runner struct {
	// Store holds the run's data.
	Store storage.Store
	// Run is the run's name (ValidateRunName).
	Run string
	// Config is the run's config; its digest must match the one pinned in
	// _RUN.json (EnsureRun).
	Config config.Config
	// Stages in registration order; the runner orders them by their table
	// dependencies.
	Stages []Stage
	// Log receives progress and warnings; nil means slog.Default().
	Log *slog.Logger
	// Progress, when set, is told about each stage's parts.
	Progress ProgressFunc
	// Now returns the time for created_at fields (observations only).
	Now func() time.Time
	// Fence, when set, is called right before each commit write (a
	// table's manifest, a round's seal); its error stops the commit and is
	// returned. `spade round next` sets it to HeldLease.Check, so that an
	// invocation that lost the run's lease commits nothing more.
	Fence func(ctx context.Context) error

	// writer is the writer registration (RegisterWriter) of the call in
	// progress: taken right before its first write to the store, so that
	// no spade gc of the run deletes while it writes, and released when the
	// call returns. A call that writes nothing (a sealed round, a
	// committed stage) takes none, so it works on a read-only store.
	writer *HeldLease

	// pinned is the config digest this runner has seen the run's
	// _RUN.json pin (read, or created by claimRun); while Config still
	// has that digest, commits skip the check. A Runner is not for
	// concurrent use.
	pinned string
}

// fence runs before a commit write of key: it registers the call as a
// writer of the run if it is not yet (beginWrite), checks that the
// registration is still there (a spade gc removes one it finds stale),
// then runs r.Fence when set.
func (r *Runner) fence(ctx context.Context, key string) error {
	if err := r.beginWrite(ctx); err != nil {
		return err
	}
	if err := r.writer.Check(ctx); err != nil {
		return fmt.Errorf("not committing %s: %w", key, err)
	}
	if r.Fence == nil {
		return nil
	}
	if err := r.Fence(ctx); err != nil {
		return fmt.Errorf("not committing %s: %w", key, err)
	}
	return nil
}

// beginWrite registers the call in progress as a writer of the run
// (RegisterWriter: it waits while a spade gc holds the run) unless it is
// already registered.
func (r *Runner) beginWrite(ctx context.Context) error {
	if r.writer != nil {
		return nil
	}
	w, err := RegisterWriter(ctx, r.Store, r.Run, r.log())
	if err != nil {
		return err
	}
	r.writer = w
	return nil
}

// endWrite releases the writer registration of the call that returns.
func (r *Runner) endWrite() {
	if r.writer != nil {
		r.writer.Release()
		r.writer = nil
	}
}

// ProgressFunc reports progress of a stage: done of total parts.
type ProgressFunc func(stage string, done, total int)

func (r *Runner) now() time.Time {
	if r.Now != nil {
		return r.Now().UTC()
	}
	return time.Now().UTC()
}

func (r *Runner) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

func (r *Runner) workers() int {
	if r.Config.Workers > 0 {
		return r.Config.Workers
	}
	return runtime.NumCPU()
}

// EnsureRun checks that the run's committed _RUN.json pins the same config
// digest (ErrConflict otherwise), or creates it (put-if-absent) when the
// run has none. The run file is read first, so a run that exists is
// checked without any write: `spade round N` on a sealed round, or a
// stage that is already committed, works on a read-only store. RunRound,
// RunStage, CommitStage and Seal do not call it up front: they check an
// existing run file (checkRun) and create a missing one right before
// their first commit write (claimRun), so a command that fails before it
// commits anything (a corpus import whose every row is skipped, a stage
// that fails) leaves no run behind to pin its config.
func (r *Runner) EnsureRun(ctx context.Context) (*RunFile, error) {
	if err := ValidateRunName(r.Run); err != nil {
		return nil, err
	}
	rf := r.runFile()
	have, err := ReadRunFile(ctx, r.Store, r.Run)
	if errors.Is(err, ErrNotCommitted) {
		b, _ := json.MarshalIndent(rf, "", "  ")
		perr := storage.PutBytesIfAbsent(ctx, r.Store, RunFileKey(r.Run), b)
		if perr == nil {
			r.pinned = rf.ConfigDigest
			return rf, nil
		}
		if !isExists(perr) {
			return nil, fmt.Errorf("create run %s: %w", r.Run, perr)
		}
		// Another invocation created the run in between: check its config.
		have, err = ReadRunFile(ctx, r.Store, r.Run)
	}
	if err != nil {
		return nil, err
	}
	if err := r.samePin(have); err != nil {
		return nil, err
	}
	r.pinned = have.ConfigDigest
	return have, nil
}

// runFile is the run file this runner would create.
func (r *Runner) runFile() *RunFile {
	return &RunFile{FormatVersion: FormatVersion, Run: r.Run, ConfigDigest: r.Config.Digest(), Config: r.Config, CodeVersion: CodeVersion(), CreatedAt: r.now()}
}

// samePin returns ErrConflict, with the settings that differ, when the
// run file have pins another config than r.Config.
func (r *Runner) samePin(have *RunFile) error {
	if d := r.Config.Digest(); have.ConfigDigest != d {
		return fmt.Errorf("run %s was created with config digest %s and this config has digest %s (differs in: %s): %w; use a new --run, or spade fork to branch from a round",
			r.Run, short(have.ConfigDigest), short(d), configDiff(have.Config, r.Config), ErrConflict)
	}
	return nil
}

// checkRun validates the run name and, when the run has a run file,
// checks that it pins r.Config (ErrConflict otherwise). It writes
// nothing: a run without a run file is created by claimRun at the first
// commit.
func (r *Runner) checkRun(ctx context.Context) error {
	if err := ValidateRunName(r.Run); err != nil {
		return err
	}
	if r.pinned != "" && r.pinned == r.Config.Digest() {
		return nil
	}
	have, err := ReadRunFile(ctx, r.Store, r.Run)
	if errors.Is(err, ErrNotCommitted) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := r.samePin(have); err != nil {
		return err
	}
	r.pinned = have.ConfigDigest
	return nil
}

// claimRun makes sure the run file pins r.Config before a commit write
// (EnsureRun, once per runner): it creates the run file when the run has
// none, and returns ErrConflict when another invocation created it
// meanwhile with another config.
func (r *Runner) claimRun(ctx context.Context) error {
	if r.pinned != "" && r.pinned == r.Config.Digest() {
		return nil
	}
	_, err := r.EnsureRun(ctx)
	return err
}

func configDiff(a, b config.Config) string {
	var diff []string
	a, b = a.Pinned(), b.Pinned()
	for _, k := range config.Keys() {
		if a.Get(k) != b.Get(k) {
			diff = append(diff, fmt.Sprintf("%s %s -> %s", k, a.Get(k), b.Get(k)))
		}
	}
	if len(diff) == 0 {
		return "nothing visible"
	}
	return strings.Join(diff, ", ")
}

// noRunError is ReadRunFile's error for a run without a run file: it
// reads "run X does not exist (no X/_RUN.json)" and matches
// ErrNotCommitted (errors.Is).
type noRunError struct{ run, key string }

// Error names the run and its missing run file.
func (e noRunError) Error() string { return fmt.Sprintf("run %s does not exist (no %s)", e.run, e.key) }

// Is makes errors.Is(err, ErrNotCommitted) true.
func (e noRunError) Is(target error) bool { return target == ErrNotCommitted }

// ReadRunFile reads a run's _RUN.json. Errors: one matching
// ErrNotCommitted, "run X does not exist (no X/_RUN.json)", when the run
// does not exist; a malformed or other-version run file, named.
func ReadRunFile(ctx context.Context, s storage.Store, run string) (*RunFile, error) {
	data, err := storage.ReadAll(ctx, s, RunFileKey(run))
	if isNotFound(err) {
		return nil, noRunError{run: run, key: RunFileKey(run)}
	}
	if err != nil {
		return nil, err
	}
	var rf RunFile
	if err := json.Unmarshal(data, &rf); err != nil {
		return nil, fmt.Errorf("%s: malformed JSON: %w", RunFileKey(run), err)
	}
	if rf.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("%s: %w %d", RunFileKey(run), ErrUnknownVersion, rf.FormatVersion)
	}
	// Settings added since the file was written read as their defaults,
	// which is what the run ran with (the digest leaves them out).
	rf.Config = rf.Config.WithDefaults()
	return &rf, nil
}

// VerifyConfig checks that the config the run file pins hashes to the
// digest it records: a run file whose config was edited by hand, or
// damaged, wraps ErrIntegrity and names the file. Readers that use the
// pinned config itself (spade fork --config-from-source, spade report)
// call it; those that compare digests only need not.
func (rf *RunFile) VerifyConfig() error {
	if d := rf.Config.Digest(); d != rf.ConfigDigest {
		return fmt.Errorf("%s: %w: its config has digest %s, but it records config_digest %s (the config was edited or damaged)", RunFileKey(rf.Run), ErrIntegrity, short(d), short(rf.ConfigDigest))
	}
	return nil
}

// ReadSeal reads round r's seal; ErrNotCommitted when absent.
func ReadSeal(ctx context.Context, s storage.Store, run string, r int) (*Seal, error) {
	key := SealKey(run, r)
	data, err := storage.ReadAll(ctx, s, key)
	if isNotFound(err) {
		return nil, fmt.Errorf("round %d of run %s: %w", r, run, ErrNotCommitted)
	}
	if err != nil {
		return nil, err
	}
	var seal Seal
	if err := json.Unmarshal(data, &seal); err != nil {
		return nil, fmt.Errorf("%s: malformed JSON: %w", key, err)
	}
	if seal.FormatVersion != FormatVersion {
		return nil, fmt.Errorf("%s: %w %d", key, ErrUnknownVersion, seal.FormatVersion)
	}
	return &seal, nil
}

// NextRound returns the first round >= 1 without a seal (round 0 is not
// looked at; a gap in the sealed rounds stops the search there). Errors
// are ReadSeal's for a seal that exists: the store's error unwrapped
// (ctx.Err() included), malformed JSON naming the key, or
// ErrUnknownVersion.
func NextRound(ctx context.Context, s storage.Store, run string) (int, error) {
	for r := 1; ; r++ {
		_, err := ReadSeal(ctx, s, run, r)
		if errors.Is(err, ErrNotCommitted) {
			return r, nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// ordered returns the stages in dependency order (a stage after every stage
// of the same round whose outputs it reads), registration order otherwise.
func (r *Runner) ordered(ri RoundInfo) ([]Stage, error) {
	producer := map[string]int{}
	for i, s := range r.Stages {
		for _, o := range s.Outputs() {
			producer[o.Table] = i
		}
	}
	var out []Stage
	state := make([]int, len(r.Stages)) // 0 new, 1 visiting, 2 done
	var visit func(i int) error
	visit = func(i int) error {
		switch state[i] {
		case 1:
			return fmt.Errorf("stage %s: dependency cycle", r.Stages[i].Name())
		case 2:
			return nil
		}
		state[i] = 1
		ins, _ := r.Stages[i].Plan(ri, &r.Config)
		for _, in := range ins {
			if in.Round != ri.Round {
				continue
			}
			if j, ok := producer[in.Table]; ok && j != i {
				if err := visit(j); err != nil {
					return err
				}
			}
		}
		state[i] = 2
		out = append(out, r.Stages[i])
		return nil
	}
	for i := range r.Stages {
		if err := visit(i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// StageByName returns the registered stage called name, or an error
// quoting name and listing the registered stages' names.
func (r *Runner) StageByName(name string) (Stage, error) {
	var names []string
	for _, s := range r.Stages {
		if s.Name() == name {
			return s, nil
		}
		names = append(names, s.Name())
	}
	return nil, fmt.Errorf("unknown stage %q (stages: %s)", name, strings.Join(names, ", "))
}

// RoundResult summarises what RunRound did.
type RoundResult struct {
	// Round is the round asked for.
	Round int `json:"round"`
	// Ran names the stages that ran (all or some of their parts) and
	// committed, in run order.
	Ran []string `json:"ran"`
	// Skipped names the stages whose outputs were already committed with
	// the same fingerprint; stages that do not run this round are in
	// neither list.
	Skipped []string `json:"skipped"`
	// Seal is the round's seal.
	Seal *Seal `json:"seal"`
	// AlreadySealed is true when the round was complete before the call.
	AlreadySealed bool `json:"already_sealed"`
}

// RunRound runs every stage of round r that is not committed yet, commits
// them, and seals the round. A sealed round is left as it is. Before it
// writes anything (the run's _RUN.json included) it checks what round r
// builds on:
//   - a fork whose spade fork was interrupted is refused
//     (ErrIncompleteFork, CheckForkComplete);
//   - round r >= 1 needs round r-1 sealed (otherwise an error that wraps
//     ErrNotCommitted, says "not sealed" and names the command that seals
//     round r-1);
//   - rounds 0..r-1 must verify (VerifyChain: every seal present, parents
//     chained, every listed manifest decoding with the content digest its
//     seal records); a failure wraps ErrIntegrity and names the file.
func (r *Runner) RunRound(ctx context.Context, round int) (*RoundResult, error) {
	if round < 0 {
		return nil, fmt.Errorf("round must be >= 0 (got %d)", round)
	}
	defer r.endWrite()
	if err := r.checkFork(ctx); err != nil {
		return nil, err
	}
	// A config conflict first: it is the answer whatever else is wrong.
	if err := r.checkRun(ctx); err != nil {
		return nil, err
	}
	if round >= 1 {
		if err := r.needSealed(ctx, round); err != nil {
			return nil, err
		}
		if err := r.verifyEarlier(ctx, round); err != nil {
			return nil, err
		}
	}
	res := &RoundResult{Round: round, Ran: []string{}, Skipped: []string{}} // [] not null in JSON
	if seal, err := ReadSeal(ctx, r.Store, r.Run, round); err == nil {
		res.Seal, res.AlreadySealed = seal, true
		return res, nil
	} else if !errors.Is(err, ErrNotCommitted) {
		return nil, err
	}
	ri := NewRoundInfo(r.Run, round, &r.Config)
	stages, err := r.ordered(ri)
	if err != nil {
		return nil, err
	}
	for _, s := range stages {
		if _, runs := s.Plan(ri, &r.Config); !runs {
			continue
		}
		ran, err := r.runStage(ctx, ri, s, Shard{Index: 0, Count: 1}, true)
		if err != nil {
			return nil, fmt.Errorf("round %d stage %s: %w", round, s.Name(), err)
		}
		if ran {
			res.Ran = append(res.Ran, s.Name())
		} else {
			res.Skipped = append(res.Skipped, s.Name())
		}
	}
	seal, err := r.seal(ctx, round) // rounds 0..round-1 were verified above
	if err != nil {
		return nil, err
	}
	res.Seal = seal
	return res, nil
}

// Shard selects the parts p with p % Count == Index.
type Shard struct {
	// Index is this shard's number, 0 <= Index < Count; Count is the number
	// of shards (>= 1; 1 runs every part).
	Index, Count int
}

// ParseShard parses "i/n" (0 <= i < n). Any other text, including one
// with a sign, leading zeros, spaces or trailing characters (the parsed
// shard must print back as s), is an error quoting s; the Shard returned
// with the error holds whatever was parsed and is not meaningful.
func ParseShard(s string) (Shard, error) {
	var sh Shard
	if _, err := fmt.Sscanf(s, "%d/%d", &sh.Index, &sh.Count); err != nil || sh.Count < 1 || sh.Index < 0 || sh.Index >= sh.Count || fmt.Sprintf("%d/%d", sh.Index, sh.Count) != s {
		return sh, fmt.Errorf("invalid shard %q: want i/n with 0 <= i < n, e.g. 2/8", s)
	}
	return sh, nil
}

// NotInRoundError is RunStage's error for a stage asked to run at a round
// where it has nothing to do (the corpus stage after round 0, a generation
// stage at round 0 or between regeneration rounds). Nothing is read or
// written, and the run is not created, before it is returned.
type NotInRoundError struct {
	// Stage is the stage's name.
	Stage string
	// Round is the round asked for.
	Round int
	// Why names the rule: which rounds the stage runs at.
	Why string
}

// Error says which stage, which round and why.
func (e *NotInRoundError) Error() string {
	return fmt.Sprintf("stage %s does not run at round %d (%s)", e.Stage, e.Round, e.Why)
}

// RunStage runs one stage of round r: the parts of one shard, committing
// the tables when commit is true and every part exists. It is what
// `spade stage NAME --round r [--shard i/n]` does. It returns whether it
// ran (false when the stage was already committed), a *NotInRoundError
// when the stage does not run at that round, or the stage's error. At
// round r >= 1 it needs round r-1 sealed, as RunRound does, and fails
// before any work otherwise (an error wrapping ErrNotCommitted that names
// the command sealing round r-1): a round run stage by stage that forgot
// the previous seal would only find out at its own seal. A stage of a
// sealed round is left as it is (false, nil), as RunRound leaves the round.
func (r *Runner) RunStage(ctx context.Context, round int, name string, shard Shard, commit bool) (bool, error) {
	s, err := r.StageByName(name)
	if err != nil {
		return false, err
	}
	defer r.endWrite()
	ri := NewRoundInfo(r.Run, round, &r.Config)
	if err := r.runsAt(s, ri); err != nil {
		return false, err
	}
	// The chain of earlier rounds is verified once per round, by Seal
	// (`spade commit --seal`), not by every shard task; the previous
	// round's seal is one read, so every task checks that it exists.
	if err := r.checkFork(ctx); err != nil {
		return false, err
	}
	if err := r.checkRun(ctx); err != nil {
		return false, err
	}
	if round >= 1 {
		if err := r.needSealed(ctx, round); err != nil {
			return false, err
		}
	}
	if sealed, err := r.leftSealed(ctx, ri, s); sealed || err != nil {
		return false, err
	}
	return r.runStage(ctx, ri, s, shard, commit)
}

// leftSealed reports whether round ri is sealed, logging that stage s is
// left as it is: as RunRound leaves a sealed round alone, so do RunStage
// and CommitStage. (Round 0 of a run whose corpus was imported holds the
// import's table, which the embedded corpus stage of an Airflow DAG or a
// Kubernetes job would otherwise call a conflict.) Errors: the store's.
func (r *Runner) leftSealed(ctx context.Context, ri RoundInfo, s Stage) (bool, error) {
	_, err := ReadSeal(ctx, r.Store, r.Run, ri.Round)
	if errors.Is(err, ErrNotCommitted) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	r.log().Info("round already sealed; stage left as it is", "round", ri.Round, "stage", s.Name())
	return true, nil
}

// runsAt returns a *NotInRoundError when s does not run at round ri.
func (r *Runner) runsAt(s Stage, ri RoundInfo) error {
	if _, runs := s.Plan(ri, &r.Config); runs {
		return nil
	}
	why := fmt.Sprintf("regeneration rounds are 1, 1+k, 1+2k, ... with k = %d", r.Config.RegenerateEvery)
	if r.Config.FixedPool() {
		why = "design.mode fixed_pool: no round regenerates"
	}
	if ri.Round == 0 {
		why = "round 0 holds the corpus only"
	} else if _, at0 := s.Plan(NewRoundInfo(r.Run, 0, &r.Config), &r.Config); at0 {
		why = "it runs at round 0 only"
	}
	return &NotInRoundError{Stage: s.Name(), Round: ri.Round, Why: why}
}

// CommitStage commits a stage whose parts were written by shards; it fails
// naming the missing parts if any is absent, and with a *NotInRoundError
// when the stage does not run at that round. It reports whether this call
// wrote a manifest: false, with a nil error, when the stage's tables were
// already committed with the same fingerprint (before the call, or by a
// concurrent commit, or the round is sealed), as RunStage reports a
// stage that did not run.
func (r *Runner) CommitStage(ctx context.Context, round int, name string) (bool, error) {
	s, err := r.StageByName(name)
	if err != nil {
		return false, err
	}
	defer r.endWrite()
	ri := NewRoundInfo(r.Run, round, &r.Config)
	if err := r.runsAt(s, ri); err != nil {
		return false, err
	}
	if err := r.checkRun(ctx); err != nil {
		return false, err
	}
	if sealed, err := r.leftSealed(ctx, ri, s); sealed || err != nil {
		return false, err
	}
	env, fp, done, err := r.prepare(ctx, ri, s)
	if err != nil || done {
		return false, err
	}
	parts, err := s.Parts(ctx, env)
	if err != nil {
		return false, err
	}
	wrote, err := r.commit(ctx, ri, s, env, fp, parts, time.Duration(0), true)
	return wrote > 0, err
}

type partRecord struct {
	FormatVersion int                  `json:"format_version"`
	Stage         string               `json:"stage"`
	Fingerprint   string               `json:"fingerprint"`
	Part          int                  `json:"part"`
	Parts         int                  `json:"parts"`
	Files         map[string]FileEntry `json:"files"`
	Refs          map[string]string    `json:"refs,omitempty"`
	Stats         map[string]any       `json:"stats,omitempty"`
}

// prepare resolves the inputs and fingerprint of s at round ri and reports
// whether all its outputs are committed already with that fingerprint.
func (r *Runner) prepare(ctx context.Context, ri RoundInfo, s Stage) (*Env, string, bool, error) {
	ins, _ := s.Plan(ri, &r.Config)
	env := &Env{Round: ri, Config: &r.Config, Stage: s.Name(), store: r.Store, inputs: map[string]*Manifest{}}
	var refs []InputRef
	for _, in := range ins {
		key := ManifestKey(r.Run, in.Round, in.Table)
		m, err := ReadManifest(ctx, r.Store, key)
		if isNotFound(err) {
			if in.Optional {
				env.inputs[inputKey(in.Table, in.Round)] = nil
				refs = append(refs, InputRef{Table: in.Table, Round: in.Round, Key: key, Digest: "absent"})
				continue
			}
			return nil, "", false, fmt.Errorf("input %s of round %d is not committed (%s)", in.Table, in.Round, key)
		}
		if err != nil {
			return nil, "", false, err
		}
		env.inputs[inputKey(in.Table, in.Round)] = m
		refs = append(refs, InputRef{Table: in.Table, Round: in.Round, Key: key, Digest: m.ContentDigest()})
	}
	fp := r.fingerprint(s, ri, refs)
	env.inputRefs = refs
	done := true
	for _, o := range s.Outputs() {
		m, err := ReadManifest(ctx, r.Store, ManifestKey(r.Run, ri.Round, o.Table))
		if isNotFound(err) {
			done = false
			continue
		}
		if err != nil {
			return nil, "", false, err
		}
		if m.StageFingerprint != fp {
			return env, fp, false, fmt.Errorf("table %s of round %d is committed with stage fingerprint %s, and this invocation computes %s (%s): %w; use a new --run, or spade fork",
				o.Table, ri.Round, short(m.StageFingerprint), short(fp), explainFingerprint(m, refs, r.Config.Digest()), ErrConflict)
		}
	}
	return env, fp, done, nil
}

func explainFingerprint(m *Manifest, refs []InputRef, cfgDigest string) string {
	var why []string
	if m.CodeVersion != CodeVersion() {
		why = append(why, fmt.Sprintf("code version %s -> %s", m.CodeVersion, CodeVersion()))
	}
	if m.ConfigDigest != cfgDigest {
		why = append(why, "config changed")
	}
	have := map[string]string{}
	for _, in := range m.Inputs {
		have[fmt.Sprintf("%s@%d", in.Table, in.Round)] = in.Digest
	}
	for _, in := range refs {
		if d := have[fmt.Sprintf("%s@%d", in.Table, in.Round)]; d != in.Digest {
			why = append(why, fmt.Sprintf("input %s of round %d changed", in.Table, in.Round))
		}
	}
	if len(why) == 0 {
		why = append(why, "stage or schema version changed")
	}
	return strings.Join(why, "; ")
}

func (r *Runner) fingerprint(s Stage, ri RoundInfo, refs []InputRef) string {
	type outFP struct{ Table, Kind, Schema string }
	var outs []outFP
	for _, o := range s.Outputs() {
		info, _ := schemas.Lookup(o.KindOf())
		outs = append(outs, outFP{o.Table, o.KindOf(), info.Fingerprint()})
	}
	// Operational settings (workers, timeouts, programs per sandbox) never
	// reach a fingerprint: a run resumes with other values (docs/config.md).
	pinned := r.Config.Pinned()
	return config.DigestOf(struct {
		Stage   string
		Round   int
		Regen   bool
		Outputs []outFP
		Config  any
		Inputs  []InputRef
		Seed    int64
		Code    string
	}{s.Name(), ri.Round, ri.Regeneration, outs, s.ConfigSubset(&pinned), refs, ri.Seed, CodeVersion()})
}

func (r *Runner) runStage(ctx context.Context, ri RoundInfo, s Stage, shard Shard, commit bool) (bool, error) {
	start := time.Now()
	env, fp, done, err := r.prepare(ctx, ri, s)
	if err != nil {
		return false, err
	}
	if done {
		r.log().Info("stage already committed", "round", ri.Round, "stage", s.Name())
		return false, nil
	}
	parts, err := s.Parts(ctx, env)
	if err != nil {
		return false, fmt.Errorf("plan parts: %w", err)
	}
	if parts < 1 {
		return false, fmt.Errorf("stage %s returned %d parts", s.Name(), parts)
	}
	// Registered before the parts are checked: from then on no gc of the
	// run deletes a part file that this call finds whole and keeps.
	if err := r.beginWrite(ctx); err != nil {
		return false, err
	}
	todo, err := r.partsToDo(ctx, ri, s, fp, shard, parts)
	if err != nil {
		return false, err
	}
	r.log().Info("stage start", "round", ri.Round, "stage", s.Name(), "parts", parts, "todo", len(todo), "shard", fmt.Sprintf("%d/%d", shard.Index, shard.Count))
	if sv, ok := s.(Serving); ok && len(todo) > 0 {
		stop, err := sv.Serve(ctx, env)
		if err != nil {
			return false, fmt.Errorf("serve the round's policy: %w", err)
		}
		defer stop()
	}
	var finished atomic.Int64
	if r.Progress != nil {
		r.Progress(s.Name(), 0, len(todo))
	}
	atOnce := r.workers()
	if pf, ok := s.(PartsInFlight); ok {
		atOnce = max(atOnce, pf.PartsInFlight(&r.Config))
	}
	wp := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError().WithMaxGoroutines(max(1, min(atOnce, len(todo))))
	for _, p := range todo {
		wp.Go(func(ctx context.Context) error {
			if err := r.runPart(ctx, env, s, fp, p, parts); err != nil {
				return fmt.Errorf("part %d of %d: %w", p, parts, err)
			}
			n := finished.Add(1)
			if r.Progress != nil {
				r.Progress(s.Name(), int(n), len(todo))
			}
			return nil
		})
	}
	if err := wp.Wait(); err != nil {
		return false, err
	}
	if !commit {
		return true, nil
	}
	wrote, err := r.commit(ctx, ri, s, env, fp, parts, time.Since(start), false)
	if err != nil {
		return false, err
	}
	if wrote == 0 {
		// Every manifest was already there, with this fingerprint: another
		// invocation committed the same stage first (identical content).
		r.log().Info("stage already committed by another invocation", "round", ri.Round, "stage", s.Name(), "seconds", time.Since(start).Seconds())
		return true, nil
	}
	r.log().Info("stage committed", "round", ri.Round, "stage", s.Name(), "seconds", time.Since(start).Seconds())
	return true, nil
}

// partsToDo returns the parts of shard that have no usable part record.
// A part whose record an earlier, interrupted invocation wrote is done
// when the record decodes as this part's and every file it lists is
// whole (size and sha256): a record, or a file it lists, that was damaged
// or deleted since (bit rot, a hand edit, a clean-up) would otherwise be
// committed into a manifest that no reader accepts and no rerun can
// replace. Such a part is run again (logged as a warning), which rewrites
// its files and record.
func (r *Runner) partsToDo(ctx context.Context, ri RoundInfo, s Stage, fp string, shard Shard, parts int) ([]int, error) {
	var candidates []int
	for p := shard.Index; p < parts; p += shard.Count {
		candidates = append(candidates, p)
	}
	redo := make([]bool, len(candidates))
	wp := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError().WithMaxGoroutines(max(1, min(r.workers(), len(candidates))))
	for i, p := range candidates {
		wp.Go(func(ctx context.Context) error {
			why, err := r.checkPartRecord(ctx, ri, s, fp, p, parts)
			if err != nil {
				return err
			}
			if why != "" {
				redo[i] = true
				if why != noPartRecord {
					r.log().Warn("part written by an earlier invocation is damaged; running it again", "round", ri.Round, "stage", s.Name(), "part", p, "why", why)
				}
			}
			return nil
		})
	}
	if err := wp.Wait(); err != nil {
		return nil, err
	}
	var todo []int
	for i, p := range candidates {
		if redo[i] {
			todo = append(todo, p)
		}
	}
	return todo, nil
}

// noPartRecord is checkPartRecord's reason for a part not written yet.
const noPartRecord = "no part record"

// checkPartRecord says why part p must run ("" when its record and files
// are whole). Errors: the store's, other than a missing object.
func (r *Runner) checkPartRecord(ctx context.Context, ri RoundInfo, s Stage, fp string, p, parts int) (string, error) {
	key := PendingKey(r.Run, ri.Round, s.Name(), fp, p)
	data, err := storage.ReadAll(ctx, r.Store, key)
	if isNotFound(err) {
		return noPartRecord, nil
	}
	if err != nil {
		return "", err
	}
	var rec partRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return fmt.Sprintf("%s: malformed part record: %v", key, err), nil
	}
	if rec.Stage != s.Name() || rec.Fingerprint != fp || rec.Part != p || rec.Parts != parts {
		return fmt.Sprintf("%s: part record of stage %s part %d of %d (fingerprint %s), want %s part %d of %d (%s)", key, rec.Stage, rec.Part, rec.Parts, short(rec.Fingerprint), s.Name(), p, parts, short(fp)), nil
	}
	for _, name := range sortedKeys(rec.Files) {
		if _, err := ReadVerified(ctx, r.Store, rec.Files[name]); err != nil {
			if errors.Is(err, ErrIntegrity) || isNotFound(err) {
				return err.Error(), nil
			}
			return "", err
		}
	}
	return "", nil
}

func (r *Runner) runPart(ctx context.Context, env *Env, s Stage, fp string, p, parts int) error {
	out := newOut(s.Outputs())
	if err := s.Run(ctx, env, p, out); err != nil {
		return err
	}
	rec := partRecord{FormatVersion: FormatVersion, Stage: s.Name(), Fingerprint: fp, Part: p, Parts: parts, Files: map[string]FileEntry{}, Refs: map[string]string{}, Stats: out.stats}
	for _, name := range sortedKeys(out.tables) {
		enc := out.tables[name]
		if enc.len() == 0 {
			continue
		}
		data, rows, groups, err := enc.encode()
		if err != nil {
			return err
		}
		fe, err := putFile(ctx, r.Store, r.Run, env.Round.Round, name, p, parts, data, rows, groups)
		if err != nil {
			return err
		}
		rec.Files[name] = fe
	}
	for name, m := range out.refs {
		if parts != 1 {
			return fmt.Errorf("stage %s: Reference needs a single part", s.Name())
		}
		rec.Refs[name] = ManifestKey(m.Run, m.Round, m.Table)
	}
	b, _ := json.Marshal(rec)
	return storage.PutBytes(ctx, r.Store, PendingKey(r.Run, env.Round.Round, s.Name(), fp, p), b)
}

// commit writes the manifests of s at round ri from its part records and
// returns how many this call wrote; a manifest already committed with the
// same fingerprint (by a concurrent invocation) is kept and not counted.
//
// verify checks each part file's size and sha256 before anything is
// committed (spade commit, whose parts other invocations wrote); without
// it each file's size is checked (runStage, which verified or wrote every
// part itself).
func (r *Runner) commit(ctx context.Context, ri RoundInfo, s Stage, env *Env, fp string, parts int, took time.Duration, verify bool) (int, error) {
	// Registered before the part files are checked: from then on no gc
	// of the run deletes one of them.
	if err := r.beginWrite(ctx); err != nil {
		return 0, err
	}
	recs := make([]partRecord, parts)
	wrote := 0
	var missing []string
	for p := 0; p < parts; p++ {
		key := PendingKey(r.Run, ri.Round, s.Name(), fp, p)
		data, err := storage.ReadAll(ctx, r.Store, key)
		if isNotFound(err) {
			missing = append(missing, fmt.Sprint(p))
			continue
		}
		if err != nil {
			return 0, err
		}
		if err := json.Unmarshal(data, &recs[p]); err != nil {
			return 0, fmt.Errorf("%s: malformed part record: %w; run the shard that writes part %d again, then spade commit", key, err, p)
		}
	}
	if len(missing) > 0 {
		// A concurrent invocation of the same round may have committed
		// the stage, sealed the round and removed the part records this
		// one skipped: then there is nothing left to commit.
		if done, err := r.committedWith(ctx, ri, s, fp); err != nil || done {
			return 0, err
		}
		return 0, fmt.Errorf("stage %s round %d: %d of %d parts missing (parts %s); run the missing shards, then spade commit", s.Name(), ri.Round, len(missing), parts, strings.Join(missing, ","))
	}
	if err := r.checkPartFiles(ctx, s, recs, verify); err != nil {
		return 0, err
	}
	for _, o := range s.Outputs() {
		info, ok := schemas.Lookup(o.KindOf())
		if !ok {
			return 0, fmt.Errorf("stage %s: output %s has unknown kind %s", s.Name(), o.Table, o.KindOf())
		}
		m := &Manifest{
			FormatVersion: FormatVersion, Run: r.Run, Round: ri.Round, Table: o.Table, Kind: info.Name,
			SchemaVersion: info.Version, SchemaFingerprint: info.Fingerprint(),
			Stage: s.Name(), StageFingerprint: fp, ConfigDigest: r.Config.Digest(), Seed: r.Config.Seed,
			Inputs: env.inputRefs, CodeVersion: CodeVersion(), Libraries: Libraries(), CreatedAt: r.now(),
			Files: []FileEntry{},
			Stats: map[string]any{"stage_seconds": took.Seconds(), "parts": parts},
		}
		for p := range recs {
			if refKey, ok := recs[p].Refs[o.Table]; ok {
				src, err := ReadManifest(ctx, r.Store, refKey)
				if err != nil {
					return 0, err
				}
				m.Files = append(m.Files, src.Files...)
				m.ReferenceOf = refKey
			}
			if fe, ok := recs[p].Files[o.Table]; ok {
				m.Files = append(m.Files, fe)
			}
			for k, v := range recs[p].Stats {
				m.Stats[k] = v
			}
		}
		for _, f := range m.Files {
			m.Rows += f.Rows
			m.Bytes += f.Bytes
		}
		key := ManifestKey(r.Run, ri.Round, o.Table)
		if err := r.fence(ctx, key); err != nil {
			return 0, err
		}
		if err := r.claimRun(ctx); err != nil {
			return 0, err
		}
		err := storage.PutBytesIfAbsent(ctx, r.Store, key, m.Encode())
		if isExists(err) {
			have, rerr := ReadManifest(ctx, r.Store, key)
			if rerr != nil {
				return 0, rerr
			}
			if have.StageFingerprint != fp {
				return 0, fmt.Errorf("%s committed concurrently with another fingerprint: %w", key, ErrConflict)
			}
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("commit %s: %w", key, err)
		}
		wrote++
	}
	return wrote, nil
}

// committedWith reports whether every output of s at round ri is
// committed with stage fingerprint fp.
func (r *Runner) committedWith(ctx context.Context, ri RoundInfo, s Stage, fp string) (bool, error) {
	for _, o := range s.Outputs() {
		m, err := ReadManifest(ctx, r.Store, ManifestKey(r.Run, ri.Round, o.Table))
		if isNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if m.StageFingerprint != fp {
			return false, nil
		}
	}
	return true, nil
}

// checkPartFiles checks that every file the part records list is whole:
// present with its recorded size, and with verify its sha256 too. A
// manifest naming a missing or damaged file could never be read or
// replaced, so the commit fails instead (ErrIntegrity), naming the file
// and the part to run again.
func (r *Runner) checkPartFiles(ctx context.Context, s Stage, recs []partRecord, verify bool) error {
	var files []FileEntry
	for p := range recs {
		for _, name := range sortedKeys(recs[p].Files) {
			files = append(files, recs[p].Files[name])
		}
	}
	wp := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError().WithMaxGoroutines(max(1, min(r.workers(), len(files))))
	for _, f := range files {
		wp.Go(func(ctx context.Context) error {
			var err error
			if verify {
				_, err = ReadVerified(ctx, r.Store, f)
			} else {
				var info storage.Info
				info, err = r.Store.Stat(ctx, f.Key)
				if err == nil && info.Size != f.Bytes {
					err = fmt.Errorf("%s: %w: %d bytes, part record says %d", f.Key, ErrIntegrity, info.Size, f.Bytes)
				}
			}
			if isNotFound(err) {
				err = fmt.Errorf("%s: %w: file missing", f.Key, ErrIntegrity)
			}
			if err != nil {
				return fmt.Errorf("stage %s: part %d: %w; nothing was committed: run the stage (or the shard that writes part %d) again to rewrite it", s.Name(), f.Part, err, f.Part)
			}
			return nil
		})
	}
	return wp.Wait()
}

// Seal writes round r's _ROUND.json once every stage that runs at r has
// committed its tables (put-if-absent; an existing seal is returned). It
// is what `spade commit --seal` does at the end of a round run stage by
// stage (Airflow, Kubernetes, Slurm), so before writing it checks what the
// seal chains onto, as RunRound does: the run is not an interrupted fork
// (ErrIncompleteFork), round r-1 is sealed (an error wrapping
// ErrNotCommitted that names the command sealing it) and rounds 0..r-1
// verify (VerifyChain, ErrIntegrity).
func (r *Runner) Seal(ctx context.Context, round int) (*Seal, error) {
	defer r.endWrite()
	if err := r.checkRun(ctx); err != nil {
		return nil, err
	}
	if seal, err := ReadSeal(ctx, r.Store, r.Run, round); err == nil {
		return seal, nil
	}
	if err := r.checkBase(ctx, round); err != nil {
		return nil, err
	}
	return r.seal(ctx, round)
}

// checkFork refuses a run whose spade fork was interrupted
// (CheckForkComplete); a run not created yet passes.
func (r *Runner) checkFork(ctx context.Context) error {
	rf, err := ReadRunFile(ctx, r.Store, r.Run)
	if errors.Is(err, ErrNotCommitted) {
		return nil
	}
	if err != nil {
		return err
	}
	return CheckForkComplete(ctx, r.Store, r.Run, rf)
}

// checkBase refuses an interrupted fork and, for round >= 1, a round-1
// that is not sealed (needSealed) or rounds 0..round-1 that do not verify
// (VerifyChain).
func (r *Runner) checkBase(ctx context.Context, round int) error {
	if err := r.checkFork(ctx); err != nil {
		return err
	}
	if round >= 1 {
		if err := r.needSealed(ctx, round); err != nil {
			return err
		}
		return r.verifyEarlier(ctx, round)
	}
	return nil
}

// needSealed returns nil when round-1 (round >= 1) is sealed, a
// *notSealedError when its seal does not exist, and ReadSeal's error
// otherwise.
func (r *Runner) needSealed(ctx context.Context, round int) error {
	_, err := ReadSeal(ctx, r.Store, r.Run, round-1)
	if !errors.Is(err, ErrNotCommitted) {
		return err
	}
	e := &notSealedError{run: r.Run, round: round, key: SealKey(r.Run, round-1)}
	if round >= 3 {
		// Rounds before round-1 may be unsealed too: then the way forward
		// starts at the first of them, not at round-1.
		if next, nerr := NextRound(ctx, r.Store, r.Run); nerr == nil && next < round-1 {
			e.first = next
		}
	}
	prev := NewRoundInfo(r.Run, round-1, &r.Config)
	if stages, oerr := r.ordered(prev); oerr == nil {
		for _, s := range stages {
			if _, runs := s.Plan(prev, &r.Config); runs {
				e.last = s.Name()
			}
		}
	}
	return e
}

// notSealedError says that round-1 has no seal, and how to write one. Its
// stages may all be committed (a round run stage by stage whose final
// `spade commit --seal` was left out), so it says "not sealed", not "not
// committed"; it still matches ErrNotCommitted for errors.Is.
type notSealedError struct {
	run   string
	round int    // the round that needs round-1
	key   string // round-1's seal
	last  string // the last stage of round-1 in run order; "" if unknown
	first int    // the run's first unsealed round when it is before round-1, else 0
}

func (e *notSealedError) Error() string {
	if e.first > 0 {
		last := ""
		if e.first > 1 {
			last = fmt.Sprintf(" (round %d is the run's last sealed round)", e.first-1)
		}
		return fmt.Sprintf("round %d needs round %d of run %s sealed, and it is not sealed (no %s); neither are the rounds before it from round %d on%s: run them in order first, starting with `spade round %d` (or `spade round next`, once a round)",
			e.round, e.round-1, e.run, e.key, e.first, last, e.first)
	}
	stage := e.last
	if stage == "" {
		stage = "<its last stage>"
	}
	msg := fmt.Sprintf("round %d needs round %d of run %s sealed, and it is not sealed (no %s): once every stage of round %d is committed, seal it with `spade commit --round %d --stage %s --seal`",
		e.round, e.round-1, e.run, e.key, e.round-1, e.round-1, stage)
	if e.round >= 2 {
		msg += fmt.Sprintf(", or run `spade round %d`, which runs what is left of it and seals it", e.round-1)
	}
	return msg
}

func (e *notSealedError) Unwrap() error { return ErrNotCommitted }

// verifyEarlier runs VerifyChain over rounds 0..round-1 (round >= 1).
func (r *Runner) verifyEarlier(ctx context.Context, round int) error {
	if err := VerifyChain(ctx, r.Store, r.Run, round-1); err != nil {
		return fmt.Errorf("round %d cannot build on rounds 0..%d of run %s: %w", round, round-1, r.Run, err)
	}
	return nil
}

// seal is Seal without the checks of earlier rounds.
func (r *Runner) seal(ctx context.Context, round int) (*Seal, error) {
	if seal, err := ReadSeal(ctx, r.Store, r.Run, round); err == nil {
		return seal, nil
	}
	ri := NewRoundInfo(r.Run, round, &r.Config)
	seal := &Seal{FormatVersion: FormatVersion, Run: r.Run, Round: round, Tables: map[string]string{}, Manifests: map[string]string{}, CreatedAt: r.now()}
	if round > 0 {
		parent, err := ReadSeal(ctx, r.Store, r.Run, round-1)
		if err == nil {
			seal.Parent = parent.Digest()
		} else {
			return nil, err
		}
	}
	for _, s := range r.Stages {
		if _, runs := s.Plan(ri, &r.Config); !runs {
			continue
		}
		for _, o := range s.Outputs() {
			key := ManifestKey(r.Run, round, o.Table)
			m, err := ReadManifest(ctx, r.Store, key)
			if isNotFound(err) {
				// spade commit --seal before the last stage: say which
				// stage is missing, not only which object was not found.
				return nil, fmt.Errorf("seal round %d: stage %s of round %d is not committed (table %s); every stage of the round must be committed before the seal: %w", round, s.Name(), round, o.Table, err)
			}
			if err != nil {
				return nil, fmt.Errorf("seal round %d: %w", round, err)
			}
			seal.Tables[o.Table] = m.ContentDigest()
			seal.Manifests[o.Table] = key
		}
	}
	b, _ := json.MarshalIndent(seal, "", "  ")
	if err := r.fence(ctx, SealKey(r.Run, round)); err != nil {
		return nil, err
	}
	if err := r.claimRun(ctx); err != nil {
		return nil, err
	}
	err := storage.PutBytesIfAbsent(ctx, r.Store, SealKey(r.Run, round), append(b, '\n'))
	if err != nil && !isExists(err) {
		return nil, fmt.Errorf("seal round %d: %w", round, err)
	}
	if err := r.cleanPending(ctx, round); err != nil {
		r.log().Warn("could not remove part records", "round", round, "err", err)
	}
	return ReadSeal(ctx, r.Store, r.Run, round)
}

// cleanPending removes the part records of a sealed round (they are only
// needed to resume or commit an unsealed one).
func (r *Runner) cleanPending(ctx context.Context, round int) error {
	infos, err := r.Store.List(ctx, RoundDir(r.Run, round)+"/_pending/")
	if err != nil {
		return err
	}
	for _, in := range infos {
		if err := r.Store.Delete(ctx, in.Key); err != nil && !isNotFound(err) {
			return err
		}
	}
	return nil
}

// TableManifests returns the committed manifests of round r, by table name,
// by trying every known stage output (readers never list directories). A
// table with no manifest is left out. It does not read the seal, so the
// manifests are not checked against the content digests it records. The
// first other error stops it: ReadManifest's (the store's error wrapped
// as "read manifest <key>", ctx.Err() included, or DecodeManifest's,
// ErrUnknownVersion among them).
func (r *Runner) TableManifests(ctx context.Context, round int) (map[string]*Manifest, error) {
	out := map[string]*Manifest{}
	for _, s := range r.Stages {
		for _, o := range s.Outputs() {
			m, err := ReadManifest(ctx, r.Store, ManifestKey(r.Run, round, o.Table))
			if isNotFound(err) {
				continue
			}
			if err != nil {
				return nil, err
			}
			out[o.Table] = m
		}
	}
	return out, nil
}

// FingerprintOf computes the stage fingerprint s would have at round r now
// (inputs resolved from the store).
func (r *Runner) FingerprintOf(ctx context.Context, s Stage, round int) string {
	_, fp, _, _ := r.prepare(ctx, NewRoundInfo(r.Run, round, &r.Config), s)
	return fp
}

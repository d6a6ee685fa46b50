package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
)

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

// configDiff lists the pinned settings whose values differ between a and
// b as "key old -> new", comma-separated ("nothing visible" when none
// does, e.g. a setting the digest sees but Keys does not list).
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

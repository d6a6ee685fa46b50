package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
)

// ForkOptions says what Fork creates.
type ForkOptions struct {
	// Source is the run to fork from; its rounds 0..Round must be sealed.
	Source string
	// Round is the last round the fork shares with Source (>= 0).
	Round int
	// Target is the new run's name.
	Target string
	// Config is the new run's config, pinned in its _RUN.json; it may
	// differ from Source's (that is the point of a fork: rounds after Round
	// run with it).
	Config config.Config
	// Now returns created_at times (observations only); nil means time.Now.
	Now func() time.Time
}

// ForkResult is what Fork wrote.
type ForkResult struct {
	// Run is the fork's run file (_RUN.json), written now or by an earlier
	// call with the same options.
	Run *RunFile
	// Manifests is the number of table manifests the fork holds.
	Manifests int
	// Seals are the fork's seals of rounds 0..Round; each has the same
	// digest (round id) as the source round it shares.
	Seals []*Seal
	// Existed is true when an earlier call with the same options had
	// already completed the fork (its run file and its last seal, written
	// last, were there), so this call wrote nothing.
	Existed bool
}

// Fork creates run Target whose rounds 0..Round are Source's, by reference
// (docs/design.md "Runs, rounds, tables": a fork refers to the source's files,
// it never copies them): for every table of every shared round a new manifest in
// Target lists the source's data files (ReferenceOf names the source
// manifest), and a seal per round repeats the source's table digests, so
// the hash chain and round ids are the source's. Target's _RUN.json pins
// opts.Config and records ForkOf/ForkRound; `spade round Round+1 --run
// Target` then continues from the shared state with Target's config.
//
// Fork writes the run file first and round Round's seal last, after every
// manifest and every earlier seal: until that seal exists the fork is
// incomplete, and RunRound and `spade status` refuse the run
// (ErrIncompleteFork, CheckForkComplete). Fork is idempotent and
// resumable: running it again with the same options completes what an
// interrupted call left and changes nothing else.
// Fork registers as a writer of Source while it works (RegisterWriter), so
// a spade gc of Source never removes the fork round's checkpoint under it.
// Errors: an invalid run name or round; ErrNotCommitted when Source or one
// of its rounds 0..Round is not sealed; ErrConflict when Target exists and
// is not this fork (another run, source, round or config); ErrIntegrity
// when a source manifest does not match its round seal.
func Fork(ctx context.Context, s storage.Store, o ForkOptions) (*ForkResult, error) {
	for _, name := range []string{o.Source, o.Target} {
		if err := ValidateRunName(name); err != nil {
			return nil, err
		}
	}
	if o.Source == o.Target {
		return nil, fmt.Errorf("fork: source and target are both %q", o.Source)
	}
	if o.Round < 0 {
		return nil, fmt.Errorf("fork: round must be >= 0 (got %d)", o.Round)
	}
	now := func() time.Time { return time.Now().UTC() }
	if o.Now != nil {
		now = func() time.Time { return o.Now().UTC() }
	}
	if _, err := ReadRunFile(ctx, s, o.Source); err != nil {
		return nil, fmt.Errorf("fork source: %w", err)
	}
	// A writer of the source while it forks: a spade gc of the source
	// (which may remove old checkpoints, pipeline/gc) waits for the fork's
	// run file, which protects the checkpoint of the fork round, or the
	// fork waits for the gc to finish.
	w, err := RegisterWriter(ctx, s, o.Source, nil)
	if err != nil {
		return nil, fmt.Errorf("fork source: %w", err)
	}
	defer w.Release()
	// Read every shared seal before writing anything, so a fork of a round
	// that is not sealed leaves nothing behind.
	seals := make([]*Seal, o.Round+1)
	for r := 0; r <= o.Round; r++ {
		seal, err := ReadSeal(ctx, s, o.Source, r)
		if errors.Is(err, ErrNotCommitted) {
			if r == o.Round {
				return nil, &ForkRoundError{Source: o.Source, Round: o.Round, LastSealed: r - 1}
			}
			if _, err := ReadSeal(ctx, s, o.Source, o.Round); errors.Is(err, ErrNotCommitted) {
				return nil, &ForkRoundError{Source: o.Source, Round: o.Round, LastSealed: r - 1}
			}
			// Round is sealed, an earlier one is not: damage, not a
			// round out of range.
			return nil, fmt.Errorf("%s: %w", unsealedForkRound(o.Source, o.Round, r-1), ErrNotCommitted)
		}
		if err != nil {
			return nil, fmt.Errorf("fork %s at round %d: %w", o.Source, o.Round, err)
		}
		seals[r] = seal
	}
	if o.Config.GRPO.Trainer != config.TrainerNone {
		// The marker lies beside the round's checkpoints manifest, in the
		// directory of the run that wrote the round.
		marker := TableDir(o.Source, o.Round, "checkpoints") + "/_REMOVED.json"
		if mk, ok := seals[o.Round].Manifests["checkpoints"]; ok {
			marker = path.Dir(mk) + "/_REMOVED.json"
		}
		m, err := ReadRemoval(ctx, s, marker)
		if err != nil {
			return nil, fmt.Errorf("fork %s at round %d: %w", o.Source, o.Round, err)
		}
		if m != nil {
			return nil, fmt.Errorf("fork %s at round %d: the checkpoint %s of that round was %w (%s): a fork that trains (grpo.trainer %s) starts from it; fork at a round whose checkpoint is kept", o.Source, o.Round, m.CheckpointID, ErrRemovedByGC, marker, o.Config.GRPO.Trainer)
		}
	}
	rf, runExisted, err := claimForkRun(ctx, s, o, now())
	if err != nil {
		return nil, err
	}
	res := &ForkResult{Run: rf}
	parent := ""
	for r, src := range seals {
		seal := &Seal{FormatVersion: FormatVersion, Run: o.Target, Round: r, Parent: parent, Tables: map[string]string{}, Manifests: map[string]string{}, CreatedAt: now()}
		for _, table := range sortedKeys(src.Manifests) {
			key, err := forkManifest(ctx, s, o.Target, src, table, now())
			if err != nil {
				return nil, err
			}
			seal.Tables[table] = src.Tables[table]
			seal.Manifests[table] = key
			res.Manifests++
		}
		if seal.Digest() != src.Digest() {
			return nil, fmt.Errorf("fork round %d: %w: seal of %s does not chain to its parent (round id %.12s, recomputed %.12s)", r, ErrIntegrity, o.Source, src.Digest(), seal.Digest())
		}
		b, _ := json.MarshalIndent(seal, "", "  ")
		err := storage.PutBytesIfAbsent(ctx, s, SealKey(o.Target, r), append(b, '\n'))
		if err != nil && !isExists(err) {
			return nil, fmt.Errorf("fork: write %s: %w", SealKey(o.Target, r), err)
		}
		res.Existed = runExisted && err != nil && r == o.Round
		have, err := ReadSeal(ctx, s, o.Target, r)
		if err != nil {
			return nil, err
		}
		if have.Digest() != seal.Digest() {
			return nil, fmt.Errorf("fork: %s exists with round id %.12s, want %.12s: %w", SealKey(o.Target, r), have.Digest(), seal.Digest(), ErrConflict)
		}
		res.Seals = append(res.Seals, have)
		parent = have.Digest()
	}
	return res, nil
}

// ErrIncompleteFork means a run was created by spade fork, and the fork
// was interrupted before it wrote its last file (CheckForkComplete).
// Running the same fork again completes it.
var ErrIncompleteFork = errors.New("incomplete fork")

// CheckForkComplete returns nil unless rf, the run file of run, records a
// fork (ForkOf) whose last shared round has no seal in run. Fork writes
// that seal last, after every manifest and every earlier seal, so its
// absence means the fork was interrupted. The error wraps
// ErrIncompleteFork and names the fork command to run again; an error
// reading the seal is returned as it is. It reads one object.
func CheckForkComplete(ctx context.Context, s storage.Store, run string, rf *RunFile) error {
	if rf.ForkOf == "" {
		return nil
	}
	_, err := ReadSeal(ctx, s, run, rf.ForkRound)
	if errors.Is(err, ErrNotCommitted) {
		return fmt.Errorf("run %s is an %w of %s at round %d: %s, the last file spade fork writes, is missing, so the fork was interrupted; run the same fork again to complete it (spade fork %s --round %d %s, with the config of digest %.12s)",
			run, ErrIncompleteFork, rf.ForkOf, rf.ForkRound, SealKey(run, rf.ForkRound), rf.ForkOf, rf.ForkRound, run, rf.ConfigDigest)
	}
	return err
}

// ForkRoundError is Fork's error when the round asked for is not a sealed
// round of the source (a round out of range). It matches ErrNotCommitted
// (errors.Is). LastSealed is the last of the source's consecutive sealed
// rounds 0..LastSealed, -1 when round 0 is not sealed either.
type ForkRoundError struct {
	// Source is the run forked from; Round the round asked for.
	Source string
	Round  int
	// LastSealed is the source's last sealed round (-1: none).
	LastSealed int
}

// Error names the first round that is not sealed and the sealed ones.
func (e *ForkRoundError) Error() string {
	return fmt.Sprintf("%s: %v", unsealedForkRound(e.Source, e.Round, e.LastSealed), ErrNotCommitted)
}

// unsealedForkRound says that a fork of source at round cannot be made
// because round lastSealed+1 of source is not sealed, naming the sealed
// rounds 0..lastSealed (none when -1).
func unsealedForkRound(source string, round, lastSealed int) string {
	have := "no round of it is sealed"
	switch {
	case lastSealed == 0:
		have = "round 0 is its only sealed round"
	case lastSealed > 0:
		have = fmt.Sprintf("its sealed rounds are 0 to %d", lastSealed)
	}
	return fmt.Sprintf("fork %s at round %d: round %d of run %s is not sealed, %s", source, round, lastSealed+1, source, have)
}

// Is makes errors.Is(err, ErrNotCommitted) true.
func (e *ForkRoundError) Is(target error) bool { return target == ErrNotCommitted }

// claimForkRun creates the target's _RUN.json, or accepts an existing one
// written by the same fork (a resumed call); the bool is true in the
// second case.
func claimForkRun(ctx context.Context, s storage.Store, o ForkOptions, at time.Time) (*RunFile, bool, error) {
	rf := &RunFile{FormatVersion: FormatVersion, Run: o.Target, ConfigDigest: o.Config.Digest(), Config: o.Config,
		ForkOf: o.Source, ForkRound: o.Round, CodeVersion: CodeVersion(), CreatedAt: at}
	b, _ := json.MarshalIndent(rf, "", "  ")
	err := storage.PutBytesIfAbsent(ctx, s, RunFileKey(o.Target), append(b, '\n'))
	if err == nil {
		return rf, false, nil
	}
	if !isExists(err) {
		return nil, false, fmt.Errorf("fork: create run %s: %w", o.Target, err)
	}
	have, err := ReadRunFile(ctx, s, o.Target)
	if err != nil {
		return nil, false, err
	}
	if have.ForkOf != o.Source || have.ForkRound != o.Round || have.ConfigDigest != rf.ConfigDigest {
		what := fmt.Sprintf("a fork of %s at round %d", have.ForkOf, have.ForkRound)
		if have.ForkOf == "" {
			what = "not a fork"
		}
		return nil, false, fmt.Errorf("fork: run %s exists (%s, config digest %.12s; this fork: %s at round %d, config digest %.12s): %w",
			o.Target, what, have.ConfigDigest, o.Source, o.Round, rf.ConfigDigest, ErrConflict)
	}
	return have, true, nil
}

// forkManifest writes the target's manifest of one table of a shared round
// and returns its key.
func forkManifest(ctx context.Context, s storage.Store, target string, src *Seal, table string, at time.Time) (string, error) {
	srcKey := src.Manifests[table]
	m, err := ReadManifest(ctx, s, srcKey)
	if err != nil {
		return "", fmt.Errorf("fork: %w", err)
	}
	if d := m.ContentDigest(); d != src.Tables[table] {
		return "", fmt.Errorf("fork: %s: %w: content digest %.12s, round seal says %.12s", srcKey, ErrIntegrity, d, src.Tables[table])
	}
	fm := *m
	fm.Run = target
	fm.ReferenceOf = srcKey
	fm.CreatedAt = at
	key := ManifestKey(target, m.Round, m.Table)
	err = storage.PutBytesIfAbsent(ctx, s, key, fm.Encode())
	if err == nil {
		return key, nil
	}
	if !errors.Is(err, storage.ErrExists) {
		return "", fmt.Errorf("fork: write %s: %w", key, err)
	}
	have, err := ReadManifest(ctx, s, key)
	if err != nil {
		return "", err
	}
	if have.ContentDigest() != fm.ContentDigest() {
		return "", fmt.Errorf("fork: %s exists with content digest %.12s, want %.12s: %w", key, have.ContentDigest(), fm.ContentDigest(), ErrConflict)
	}
	return key, nil
}

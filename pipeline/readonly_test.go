package pipeline_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/schemas"
)

// errReadOnly is what readOnlyStore's writes fail with.
var errReadOnly = errors.New("read-only store")

// readOnlyStore passes reads through and refuses every write, counting
// the attempts (a file store on a read-only mount, S3 credentials that
// may only read).
type readOnlyStore struct {
	storage.Store
	writes atomic.Int64
}

func (s *readOnlyStore) Put(context.Context, string, io.Reader, int64) error {
	s.writes.Add(1)
	return errReadOnly
}

func (s *readOnlyStore) PutIfAbsent(context.Context, string, io.Reader, int64) error {
	s.writes.Add(1)
	return errReadOnly
}

func (s *readOnlyStore) Delete(context.Context, string) error {
	s.writes.Add(1)
	return errReadOnly
}

// TestSealedRoundWritesNothing: running a round that is already sealed,
// or a stage that is already committed, is a no-op that attempts no write,
// so it succeeds on a read-only store. It used to fail: EnsureRun wrote
// the run file (put-if-absent) before looking at what was committed. An
// unsealed round still fails there, with the store's error; a sealed
// round under another config is still a conflict.
func TestSealedRoundWritesNothing(t *testing.T) {
	ctx := context.Background()
	st := memStore(t)
	for n := 0; n <= 1; n++ {
		_, err := newRunner(t, st, "a", &gen{parts: 2, rows: 6, failPart: -1}).RunRound(ctx, n)
		require.NoError(t, err)
	}

	ro := &readOnlyStore{Store: st}
	r := newRunner(t, ro, "a", &gen{parts: 2, rows: 6, failPart: -1})
	for n := 0; n <= 1; n++ {
		res, err := r.RunRound(ctx, n)
		require.NoError(t, err, "round %d", n)
		require.True(t, res.AlreadySealed, "round %d", n)
	}
	ran, err := r.RunStage(ctx, 1, "gen", pipeline.Shard{Index: 0, Count: 1}, true)
	require.NoError(t, err)
	require.False(t, ran)
	_, err = r.Seal(ctx, 1)
	require.NoError(t, err)
	require.Zero(t, ro.writes.Load(), "writes attempted on sealed rounds")

	r.Config.Sample.Slots = 7
	_, err = r.RunRound(ctx, 1)
	require.ErrorIs(t, err, pipeline.ErrConflict)
	require.Zero(t, ro.writes.Load())

	r.Config.Sample.Slots = newRunner(t, st, "a", nil).Config.Sample.Slots
	_, err = r.RunRound(ctx, 2)
	require.ErrorIs(t, err, errReadOnly)
	require.NotZero(t, ro.writes.Load())

	// A run that does not exist yet is still created on a writable store.
	_, err = newRunner(t, st, "b", &gen{parts: 1, rows: 1, failPart: -1}).EnsureRun(ctx)
	require.NoError(t, err)
	_, err = pipeline.ReadRunFile(ctx, st, "b")
	require.NoError(t, err)
}

// corpus0 is a round-0 stage whose Run calls during (nil: nothing) and
// then fails with err (nil: emits one metrics row).
type corpus0 struct {
	during func()
	err    error
}

func (corpus0) Name() string               { return "corpus0" }
func (corpus0) Outputs() []pipeline.Output { return []pipeline.Output{{Table: "metrics"}} }
func (corpus0) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	return nil, ri.Round == 0
}
func (corpus0) ConfigSubset(*config.Config) any                   { return nil }
func (corpus0) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }
func (c corpus0) Run(_ context.Context, _ *pipeline.Env, _ int, out *pipeline.Out) error {
	if c.during != nil {
		c.during()
	}
	if c.err != nil {
		return c.err
	}
	pipeline.Emit(out, schemas.Metrics, "metrics", schemas.Metric{Name: "m", Skill: "s", Value: 1})
	return nil
}

// TestFailedFirstRoundLeavesNoRun: a command that fails before it commits
// anything leaves no run file behind, so the run's config is not pinned
// by a failure (it used to be: a corpus import whose every row was
// skipped, retried with a fixed config, was refused as a conflict). The
// run file is created right before the first commit, and an invocation
// that finds it created meanwhile under another config still stops with
// ErrConflict before committing.
func TestFailedFirstRoundLeavesNoRun(t *testing.T) {
	ctx := context.Background()
	st := memStore(t)
	runner := func(slots int, c corpus0) *pipeline.Runner {
		cfg := config.Default()
		cfg.Sample.Slots = slots
		return &pipeline.Runner{Store: st, Run: "r", Config: cfg, Stages: []pipeline.Stage{c}}
	}
	_, err := runner(3, corpus0{err: errors.New("every row skipped")}).RunRound(ctx, 0)
	require.ErrorContains(t, err, "every row skipped")
	_, err = pipeline.ReadRunFile(ctx, st, "r")
	require.ErrorIs(t, err, pipeline.ErrNotCommitted, "a failed first round created the run")
	_, err = runner(3, corpus0{err: errors.New("boom")}).RunStage(ctx, 0, "corpus0", pipeline.Shard{Index: 0, Count: 1}, true)
	require.ErrorContains(t, err, "boom")
	_, err = pipeline.ReadRunFile(ctx, st, "r")
	require.ErrorIs(t, err, pipeline.ErrNotCommitted, "a failed stage created the run")

	// Retried under another config: not a conflict, the run is created.
	_, err = runner(5, corpus0{}).RunRound(ctx, 0)
	require.NoError(t, err)
	rf, err := pipeline.ReadRunFile(ctx, st, "r")
	require.NoError(t, err)
	require.Equal(t, 5, rf.Config.Sample.Slots)
	_, err = runner(3, corpus0{}).RunRound(ctx, 0)
	require.ErrorIs(t, err, pipeline.ErrConflict)

	// Another invocation creates the run under another config while this
	// one runs its stage: this one commits nothing.
	st2, err := storage.Open(ctx, "mem://TestFailedFirstRoundLeavesNoRun_concurrent")
	require.NoError(t, err)
	var errB error
	a := runner(3, corpus0{during: func() {
		b := runner(4, corpus0{})
		b.Store = st2
		_, errB = b.RunRound(ctx, 0)
	}})
	a.Store = st2
	_, err = a.RunRound(ctx, 0)
	require.NoError(t, errB)
	require.ErrorIs(t, err, pipeline.ErrConflict)
	m, err := pipeline.ReadManifest(ctx, st2, pipeline.ManifestKey("r", 0, "metrics"))
	require.NoError(t, err)
	b := runner(4, corpus0{})
	require.Equal(t, b.Config.Digest(), m.ConfigDigest, "the manifest is the other invocation's")
}

// importedCorpus0 is corpus0 with another fingerprint: the round-0 table
// of a run whose corpus was imported (another stage's config subset).
type importedCorpus0 struct{ corpus0 }

func (importedCorpus0) ConfigSubset(*config.Config) any { return "imported" }

// TestStageOfSealedRoundLeftAlone: `spade stage` and `spade commit` of a
// stage of a sealed round leave it as it is, as `spade round` does, also
// when the round's table was committed by another stage (a run whose
// corpus was imported, run by the Airflow DAG, whose first tasks are the
// embedded corpus stage and round 0's seal). They used to fail with a
// conflict (exit 3), so every DAG run of such a run failed at once.
func TestStageOfSealedRoundLeftAlone(t *testing.T) {
	ctx := context.Background()
	st := memStore(t)
	imp := &pipeline.Runner{Store: st, Run: "r", Config: config.Default(), Stages: []pipeline.Stage{importedCorpus0{}}}
	_, err := imp.RunRound(ctx, 0)
	require.NoError(t, err)

	dag := &pipeline.Runner{Store: &readOnlyStore{Store: st}, Run: "r", Config: config.Default(), Stages: []pipeline.Stage{corpus0{}}}
	ran, err := dag.RunStage(ctx, 0, "corpus0", pipeline.Shard{Index: 0, Count: 1}, true)
	require.NoError(t, err)
	require.False(t, ran)
	wrote, err := dag.CommitStage(ctx, 0, "corpus0")
	require.NoError(t, err)
	require.False(t, wrote)
	_, err = dag.Seal(ctx, 0)
	require.NoError(t, err)

	// Unsealed, the same mismatch is still a conflict.
	st2, err := storage.Open(ctx, "mem://TestStageOfSealedRoundLeftAlone_unsealed")
	require.NoError(t, err)
	imp.Store = st2
	_, err = imp.RunStage(ctx, 0, "corpus0", pipeline.Shard{Index: 0, Count: 1}, true)
	require.NoError(t, err)
	dag.Store = st2
	_, err = dag.RunStage(ctx, 0, "corpus0", pipeline.Shard{Index: 0, Count: 1}, true)
	require.ErrorIs(t, err, pipeline.ErrConflict)
}

// TestConflictBeforeRoundChecks: a config that differs from the run's is
// reported as the conflict it is (exit 3), before the checks of what the
// round builds on, which used to answer first with "round 0 not sealed"
// (exit 1) or only after verifying the whole chain.
func TestConflictBeforeRoundChecks(t *testing.T) {
	ctx := context.Background()
	st := memStore(t)
	cfg := config.Default()
	r := &pipeline.Runner{Store: st, Run: "r", Config: cfg, Stages: []pipeline.Stage{corpus0{}}}
	_, err := r.RunStage(ctx, 0, "corpus0", pipeline.Shard{Index: 0, Count: 1}, true) // committed, not sealed
	require.NoError(t, err)
	other := cfg
	other.Sample.Slots++
	r2 := &pipeline.Runner{Store: st, Run: "r", Config: other, Stages: []pipeline.Stage{corpus0{}, &gen{parts: 1, rows: 1, failPart: -1}}}
	_, err = r2.RunRound(ctx, 1)
	require.ErrorIs(t, err, pipeline.ErrConflict)
	_, err = r2.RunStage(ctx, 1, "gen", pipeline.Shard{Index: 0, Count: 1}, true)
	require.ErrorIs(t, err, pipeline.ErrConflict)
}

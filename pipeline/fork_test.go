package pipeline_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/memstore"
	"github.com/spade-pipeline/spade/schemas"
)

// forkWalk is a stage whose round-r rows depend on round r-1's rows and
// the seed, so a fork's later rounds show whether they continued from the
// shared state and with which config.
type forkWalk struct{}

func (forkWalk) Name() string               { return "walk" }
func (forkWalk) Outputs() []pipeline.Output { return []pipeline.Output{{Table: "metrics"}} }
func (forkWalk) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	if ri.Round == 0 {
		return nil, false
	}
	return []pipeline.Input{{Table: "metrics", Round: ri.Round - 1, Optional: ri.Round == 1}}, true
}
func (forkWalk) ConfigSubset(c *config.Config) any                 { return c.Seed }
func (forkWalk) Parts(context.Context, *pipeline.Env) (int, error) { return 2, nil }
func (forkWalk) Run(ctx context.Context, env *pipeline.Env, part int, out *pipeline.Out) error {
	prev, err := pipeline.ReadAll(ctx, env, schemas.Metrics, "metrics", env.Round.Round-1)
	if err != nil {
		return err
	}
	var sum float64
	for _, m := range prev {
		sum += m.Value
	}
	for i := part; i < 6; i += 2 {
		pipeline.Emit(out, schemas.Metrics, "metrics", schemas.Metric{Name: fmt.Sprintf("m%d", i), Value: sum + float64(env.Round.Seed*int64(i+1))})
	}
	return nil
}

// forkSetup writes round 0's one-row corpus.
type forkSetup struct{}

func (forkSetup) Name() string               { return "setup" }
func (forkSetup) Outputs() []pipeline.Output { return []pipeline.Output{{Table: "corpus"}} }
func (forkSetup) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	return nil, ri.Round == 0
}
func (forkSetup) ConfigSubset(*config.Config) any                   { return nil }
func (forkSetup) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }
func (forkSetup) Run(_ context.Context, _ *pipeline.Env, _ int, out *pipeline.Out) error {
	pipeline.Emit(out, schemas.Corpus, "corpus", schemas.CorpusDoc{DocID: "d1", Title: "t", Text: "x"})
	return nil
}

// forkCarry carries round 0's corpus forward by reference at every round,
// as the memory and pool stages do between regenerations.
type forkCarry struct{}

func (forkCarry) Name() string { return "carry" }
func (forkCarry) Outputs() []pipeline.Output {
	return []pipeline.Output{{Table: "memory_ref", Kind: "corpus"}}
}
func (forkCarry) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	return []pipeline.Input{{Table: "corpus", Round: 0}}, ri.Round > 0
}
func (forkCarry) ConfigSubset(*config.Config) any                   { return nil }
func (forkCarry) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }
func (forkCarry) Run(_ context.Context, env *pipeline.Env, _ int, out *pipeline.Out) error {
	out.Reference("memory_ref", env.Manifest("corpus", 0))
	return nil
}

func forkRunner(s storage.Store, run string, seed int64) *pipeline.Runner {
	cfg := config.Default()
	cfg.Seed = seed
	cfg.Workers = 2
	return &pipeline.Runner{Store: s, Run: run, Config: cfg, Stages: []pipeline.Stage{forkSetup{}, forkWalk{}, forkCarry{}}}
}

func runRounds(t *testing.T, r *pipeline.Runner, rounds ...int) {
	t.Helper()
	for _, n := range rounds {
		_, err := r.RunRound(context.Background(), n)
		require.NoError(t, err, "round %d of %s", n, r.Run)
	}
}

// testForkSameConfig is TestFork's "same config continues to identical
// rounds" subtest (src: the source run's runner, rounds 0..2 run), a
// function of its own to keep TestFork short.
func testForkSameConfig(t *testing.T, ctx context.Context, s *memstore.Store, src *pipeline.Runner) {
	res, err := pipeline.Fork(ctx, s, pipeline.ForkOptions{Source: "src", Round: 1, Target: "same", Config: src.Config})
	require.NoError(t, err)
	require.False(t, res.Existed)
	require.Equal(t, "src", res.Run.ForkOf)
	require.Equal(t, 1, res.Run.ForkRound)
	require.Len(t, res.Seals, 2)
	require.Equal(t, 3, res.Manifests) // corpus; metrics and memory_ref of round 1
	for r := 0; r <= 1; r++ {
		want, err := pipeline.ReadSeal(ctx, s, "src", r)
		require.NoError(t, err)
		require.Equal(t, want.Digest(), res.Seals[r].Digest(), "round id of round %d", r)
	}
	m, err := pipeline.ReadManifest(ctx, s, pipeline.ManifestKey("same", 1, "metrics"))
	require.NoError(t, err)
	require.Equal(t, "same", m.Run)
	require.Equal(t, pipeline.ManifestKey("src", 1, "metrics"), m.ReferenceOf)
	for _, f := range m.Files {
		require.Contains(t, f.Key, "src/round=000001/metrics/part-", "files are the source's, not copies")
	}
	// Nothing was copied: the fork has only manifests, seals and its run file.
	infos, err := s.List(ctx, "same/")
	require.NoError(t, err)
	for _, in := range infos {
		require.NotContains(t, in.Key, ".parquet")
	}
	fork := forkRunner(s, "same", 3)
	runRounds(t, fork, 2)
	a, err := pipeline.ReadSeal(ctx, s, "src", 2)
	require.NoError(t, err)
	b, err := pipeline.ReadSeal(ctx, s, "same", 2)
	require.NoError(t, err)
	require.Equal(t, a.Tables, b.Tables)
	require.Equal(t, a.Digest(), b.Digest())
	// A reference made in the fork points at the fork's own manifest.
	ref, err := pipeline.ReadManifest(ctx, s, pipeline.ManifestKey("same", 2, "memory_ref"))
	require.NoError(t, err)
	require.Equal(t, pipeline.ManifestKey("same", 0, "corpus"), ref.ReferenceOf)
}

func TestFork(t *testing.T) {
	ctx := context.Background()
	s := memstore.New(t.Name())
	t.Cleanup(func() { memstore.Forget(t.Name()) })
	src := forkRunner(s, "src", 3)
	runRounds(t, src, 0, 1, 2)

	t.Run("same config continues to identical rounds", func(t *testing.T) { testForkSameConfig(t, ctx, s, src) })

	t.Run("another config changes only later rounds", func(t *testing.T) {
		other := forkRunner(s, "other", 5)
		_, err := pipeline.Fork(ctx, s, pipeline.ForkOptions{Source: "src", Round: 1, Target: "other", Config: other.Config})
		require.NoError(t, err)
		runRounds(t, other, 2, 3)
		a, _ := pipeline.ReadSeal(ctx, s, "src", 2)
		b, err := pipeline.ReadSeal(ctx, s, "other", 2)
		require.NoError(t, err)
		require.NotEqual(t, a.Tables["metrics"], b.Tables["metrics"])
		require.Equal(t, a.Tables["memory_ref"], b.Tables["memory_ref"])
		// The source run is untouched and still refuses the other config.
		_, err = forkRunner(s, "src", 5).RunRound(ctx, 3)
		require.ErrorIs(t, err, pipeline.ErrConflict)
	})

	t.Run("fork of a fork", func(t *testing.T) {
		_, err := pipeline.Fork(ctx, s, pipeline.ForkOptions{Source: "same", Round: 2, Target: "grand", Config: src.Config})
		require.NoError(t, err)
		m, err := pipeline.ReadManifest(ctx, s, pipeline.ManifestKey("grand", 1, "metrics"))
		require.NoError(t, err)
		require.Equal(t, pipeline.ManifestKey("same", 1, "metrics"), m.ReferenceOf)
		require.Contains(t, m.Files[0].Key, "src/round=000001/")
	})

	t.Run("idempotent and conflicts", func(t *testing.T) {
		opts := pipeline.ForkOptions{Source: "src", Round: 1, Target: "same", Config: src.Config}
		_, err := pipeline.Fork(ctx, s, opts)
		require.NoError(t, err, "repeating a fork is a no-op")
		opts.Round = 0
		_, err = pipeline.Fork(ctx, s, opts)
		require.ErrorIs(t, err, pipeline.ErrConflict)
		_, err = pipeline.Fork(ctx, s, pipeline.ForkOptions{Source: "same", Round: 1, Target: "src", Config: src.Config})
		require.ErrorIs(t, err, pipeline.ErrConflict)
	})

	t.Run("bad requests leave nothing behind", func(t *testing.T) {
		cases := []struct {
			name string
			o    pipeline.ForkOptions
			want error
		}{
			{"unsealed round", pipeline.ForkOptions{Source: "src", Round: 7, Target: "n1"}, pipeline.ErrNotCommitted},
			{"missing source", pipeline.ForkOptions{Source: "nope", Round: 0, Target: "n2"}, pipeline.ErrNotCommitted},
			{"negative round", pipeline.ForkOptions{Source: "src", Round: -1, Target: "n3"}, nil},
			{"bad name", pipeline.ForkOptions{Source: "src", Round: 0, Target: "_x"}, nil},
			{"same name", pipeline.ForkOptions{Source: "src", Round: 0, Target: "src"}, nil},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				_, err := pipeline.Fork(ctx, s, c.o)
				require.Error(t, err)
				if c.want != nil {
					require.ErrorIs(t, err, c.want)
				}
				if c.name == "unsealed round" {
					require.ErrorContains(t, err, "round 3 of run src is not sealed, its sealed rounds are 0 to 2")
				}
				if c.o.Target != "src" {
					infos, lerr := s.List(ctx, c.o.Target+"/")
					require.NoError(t, lerr)
					require.Empty(t, infos)
				}
			})
		}
	})

	t.Run("tampered source manifest", func(t *testing.T) {
		key := pipeline.ManifestKey("src", 1, "metrics")
		m, err := pipeline.ReadManifest(ctx, s, key)
		require.NoError(t, err)
		orig := m.Encode()
		m.Files = m.Files[:1]
		m.Rows, m.Bytes = m.Files[0].Rows, m.Files[0].Bytes
		require.NoError(t, storage.PutBytes(ctx, s, key, m.Encode()))
		t.Cleanup(func() { require.NoError(t, storage.PutBytes(ctx, s, key, orig)) })
		_, err = pipeline.Fork(ctx, s, pipeline.ForkOptions{Source: "src", Round: 1, Target: "tampered", Config: src.Config})
		require.ErrorIs(t, err, pipeline.ErrIntegrity)
	})
}

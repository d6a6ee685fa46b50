package grpo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/reward"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	_ "github.com/spade-pipeline/spade/pipeline/storage/memstore"
	"github.com/spade-pipeline/spade/schemas"
)

func rollout(env string, hinted bool, sample int, ret float64) schemas.Rollout {
	return schemas.Rollout{EnvID: env, Hinted: hinted, Sample: int64(sample), Return: ret,
		Messages: []schemas.Message{{Role: "user", Content: "obs " + env}, {Role: "assistant", Content: fmt.Sprintf("act %d", sample)}}}
}

func fp(v float64) *float64 { return &v }

func design(slot, skill string, attempt int, final bool, errText, response string) schemas.Design {
	prompt, _ := json.Marshal([]schemas.Message{{Role: "system", Content: "design"}, {Role: "user", Content: "slot " + slot}})
	return schemas.Design{SlotID: slot, Attempt: int64(attempt), Skill: skill, Final: final, Error: errText, Response: response, Prompt: string(prompt)}
}

// batchFixture is a regeneration round: three admitted environments (one
// all-won: zero variance), one not admitted, one invalid; four slots with
// retries.
func batchFixture() ([]schemas.Rollout, []schemas.Label, []schemas.Design) {
	var plays []schemas.Rollout
	returns := map[string][]float64{
		"envA": {1, 0, 0.5, 1},
		"envB": {1, 1, 1, 1}, // zero variance
		"envC": {0, 0.25, 0, 0.75},
		"envX": {1, 0, 1, 0}, // not admitted
	}
	for _, env := range []string{"envA", "envB", "envC", "envX"} {
		for i, r := range returns[env] {
			plays = append(plays, rollout(env, false, i, r))
			plays = append(plays, rollout(env, true, i, 1)) // hinted plays never train
		}
	}
	labels := []schemas.Label{
		{EnvID: "envA", SlotID: "s0", Skill: "planning", Valid: true, Admitted: true, DesignerReward: fp(0.5)},
		{EnvID: "envB", SlotID: "s1", Skill: "planning", Valid: true, Admitted: true, DesignerReward: fp(0)},
		{EnvID: "envC", SlotID: "s2", Skill: "spatial", Valid: true, Admitted: true, DesignerReward: fp(0.25)},
		{EnvID: "envX", SlotID: "s3", Skill: "spatial", Valid: true, Admitted: false, DesignerReward: fp(-0.1)},
		{EnvID: "envI", SlotID: "s4", Skill: "spatial", Valid: false, Admitted: false, DesignerReward: fp(-1)},
	}
	designs := []schemas.Design{
		design("s0", "planning", 0, false, "no code block", "prose"),
		design("s0", "planning", 1, true, "", "code A"),
		design("s1", "planning", 0, true, "", "code B"),
		design("s2", "spatial", 0, false, "quick check: reset failed", "bad code"),
		design("s2", "spatial", 1, false, "model: timeout", ""), // no response: not a sample
		design("s2", "spatial", 2, true, "", "code C"),
		design("s3", "spatial", 0, true, "", "code X"),
		design("s4", "spatial", 0, true, "", "code I"),
		// A final attempt that failed its quick checks: -1 even though no
		// label names the slot.
		design("s5", "planning", 0, true, "no code block", "still prose"),
	}
	return plays, labels, designs
}

func TestBuildBatch(t *testing.T) {
	cfg := config.Default()
	plays, labels, designs := batchFixture()
	batch, stats, err := BuildBatch(&cfg, plays, labels, designs)
	require.NoError(t, err)

	byID := map[string]schemas.TrainSample{}
	groups := map[string][]schemas.TrainSample{}
	for _, s := range batch {
		require.NotContains(t, byID, s.SampleID, "duplicate sample id")
		byID[s.SampleID] = s
		groups[s.Role+"/"+s.Group] = append(groups[s.Role+"/"+s.Group], s)
	}

	t.Run("agent samples are unhinted plays of admitted environments", func(t *testing.T) {
		for _, env := range []string{"envA", "envB", "envC"} {
			g := groups["agent/"+env]
			require.Len(t, g, 4, env)
			for i, s := range g {
				require.Equal(t, fmt.Sprintf("agent-%s-%04d", env, i), s.SampleID)
				require.Equal(t, "assistant_turns", s.MaskSource)
				require.EqualValues(t, 1, s.Weight)
				require.Equal(t, "obs "+env, s.Messages[0].Content)
			}
		}
		require.Empty(t, groups["agent/envX"], "not admitted: no agent samples")
		require.EqualValues(t, 12, stats["agent_samples"])
		require.EqualValues(t, 3, stats["agent_groups"])
		require.EqualValues(t, 1, stats["zero_variance_groups"])
		require.Equal(t, 1.0, byID["agent-envA-0000"].Reward)
		require.Equal(t, 0.5, byID["agent-envA-0002"].Reward, "reward is the play's return")
	})

	t.Run("agent advantages have mean 0 per group, zero-variance groups 0", func(t *testing.T) {
		for _, env := range []string{"envA", "envC"} {
			var sum, sq float64
			for _, s := range groups["agent/"+env] {
				sum += s.Advantage
				sq += s.Advantage * s.Advantage
			}
			require.InDelta(t, 0, sum/4, 1e-9, env)
			require.InDelta(t, 1, sq/4, 1e-5, "%s: unit population variance", env)
		}
		for _, s := range groups["agent/envB"] {
			require.Zero(t, s.Advantage, "zero-variance group must get advantage exactly 0")
		}
		// envA returns 1, 0, 0.5, 1: mean 0.625, population std sqrt(0.171875).
		std := math.Sqrt(0.171875)
		require.InDelta(t, (1-0.625)/(std+cfg.GRPO.Eps), byID["agent-envA-0000"].Advantage, 1e-12)
		require.InDelta(t, (0-0.625)/(std+cfg.GRPO.Eps), byID["agent-envA-0001"].Advantage, 1e-12)
	})

	t.Run("designer rewards: final attempt gets the label, earlier ones -1", func(t *testing.T) {
		want := map[string]float64{
			"designer-s0-0": -1, "designer-s0-1": 0.5,
			"designer-s1-0": 0,
			"designer-s2-0": -1, "designer-s2-2": 0.25,
			"designer-s3-0": -0.1,
			"designer-s4-0": -1,
			"designer-s5-0": -1,
		}
		got := map[string]float64{}
		for _, s := range batch {
			if s.Role == "designer" {
				got[s.SampleID] = s.Reward
				require.Equal(t, "last_assistant", s.MaskSource)
				last := s.Messages[len(s.Messages)-1]
				require.Equal(t, "assistant", last.Role)
				require.NotEmpty(t, last.Content)
				require.Equal(t, "system", s.Messages[0].Role, "the prompt's messages come first")
			}
		}
		require.Equal(t, want, got)
		require.NotContains(t, byID, "designer-s2-1", "an attempt without a response is not a sample")
		require.EqualValues(t, 8, stats["designer_samples"])
	})

	t.Run("designer advantages centred per skill, one weight", func(t *testing.T) {
		for _, skill := range []string{"planning", "spatial"} {
			g := groups["designer/"+skill]
			require.NotEmpty(t, g)
			var sum float64
			for _, s := range g {
				sum += s.Advantage
				require.Equal(t, g[0].Weight, s.Weight)
			}
			require.InDelta(t, 0, sum, 1e-9, skill)
		}
		// ratio rule: 12 agent / 8 designer x k=4 = 6.
		require.InDelta(t, 6, byID["designer-s0-1"].Weight, 1e-12)
		require.InDelta(t, 6, stats["designer_weight"], 1e-12)
		// planning rewards -1, 0.5, 0, -1: mean -0.375.
		require.InDelta(t, 0.5+0.375, byID["designer-s0-1"].Advantage, 1e-12)
	})

	t.Run("deterministic and order-independent", func(t *testing.T) {
		p2, l2, d2 := batchFixture()
		reverse(p2)
		reverse(l2)
		again, _, err := BuildBatch(&cfg, p2, l2, d2)
		require.NoError(t, err)
		require.Equal(t, batch[:12], again[:12], "agent samples do not depend on input order")
	})
}

func reverse[T any](s []T) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}

// TestBuildBatchFinalAttemptGetsItsLabel: a final attempt whose quick
// check failed but whose environment then passed full validation (a flaky
// check) gets its environment's designer reward, as labels.designer_reward
// says (docs/regret.md), not -1.
func TestBuildBatchFinalAttemptGetsItsLabel(t *testing.T) {
	cfg := config.Default()
	labels := []schemas.Label{{EnvID: "e", SlotID: "s0", Skill: "planning", Valid: true, Admitted: true, DesignerReward: fp(0.5)}}
	designs := []schemas.Design{
		design("s0", "planning", 0, false, "quick check reset: timeout", "code"),
		design("s0", "planning", 1, true, "quick check reset: timeout", "code"),
	}
	batch, _, err := BuildBatch(&cfg, nil, labels, designs)
	require.NoError(t, err)
	require.Len(t, batch, 2)
	require.Equal(t, -1.0, batch[0].Reward, "earlier attempt")
	require.Equal(t, 0.5, batch[1].Reward, "final attempt: its label's designer reward")
}

// TestBuildBatchOffRegeneration: between regenerations there are no
// designs and no hinted plays; only agent samples.
func TestBuildBatchOffRegeneration(t *testing.T) {
	cfg := config.Default()
	plays := []schemas.Rollout{rollout("e1", false, 0, 1), rollout("e1", false, 1, 0), rollout("e2", false, 0, 0)}
	labels := []schemas.Label{{EnvID: "e1", Valid: true, Admitted: true}, {EnvID: "e2", Valid: true, Admitted: true}}
	batch, stats, err := BuildBatch(&cfg, plays, labels, nil)
	require.NoError(t, err)
	require.Len(t, batch, 3)
	for _, s := range batch {
		require.Equal(t, "agent", s.Role)
	}
	require.EqualValues(t, 0, stats["designer_samples"])
	require.EqualValues(t, 1, stats["singleton_groups"])
	require.Zero(t, batch[2].Advantage, "a singleton group gets advantage 0")
	require.InDelta(t, 1, batch[0].Advantage, 1e-5)
	require.InDelta(t, -1, batch[1].Advantage, 1e-5)
}

// TestBuildBatchPlaysWithoutAnAgentTurn: an unhinted play of an admitted
// environment whose environment failed to load or reset (no messages), or
// whose agent's first model call failed (no assistant message), has no
// tokens to train. It used to become an agent sample that the trainer
// protocol refuses ("no assistant message to train on"), so one such play
// failed the round's grpo stage for good. Like a design attempt without a
// response, it is not a sample, and its group is the plays that are.
func TestBuildBatchPlaysWithoutAnAgentTurn(t *testing.T) {
	cfg := config.Default()
	plays := []schemas.Rollout{
		rollout("e", false, 0, 1), rollout("e", false, 1, 0), rollout("e", false, 2, 0.5),
		{EnvID: "e", Sample: 3, Error: "env reset: timeout"},
		{EnvID: "e", Sample: 4, Error: "agent: timeout", Messages: []schemas.Message{{Role: "system", Content: "play"}, {Role: "user", Content: "obs"}}},
		{EnvID: "e", Sample: 5, Error: "env load: exit 1"},
	}
	labels := []schemas.Label{{EnvID: "e", Valid: true, Admitted: true}}
	batch, stats, err := BuildBatch(&cfg, plays, labels, nil)
	require.NoError(t, err)
	require.Len(t, batch, 3)
	require.EqualValues(t, 3, stats["agent_samples"])
	// Rewards 1, 0, 0.5: mean 0.5, population std sqrt(1/6) (eps aside).
	want := []float64{math.Sqrt(1.5), -math.Sqrt(1.5), 0}
	for i, s := range batch {
		require.Equal(t, fmt.Sprintf("agent-e-%04d", i), s.SampleID)
		require.InDelta(t, want[i], s.Advantage, 1e-5)
	}
	samples := make([]Sample, len(batch))
	for i, b := range batch {
		msgs := make([]Message, len(b.Messages))
		for j, m := range b.Messages {
			msgs[j] = Message{Role: m.Role, Content: m.Content}
		}
		samples[i] = Sample{SampleID: b.SampleID, Role: b.Role, Group: b.Group, Messages: msgs, Reward: b.Reward, Advantage: b.Advantage, Weight: b.Weight}
	}
	require.NoError(t, WriteBatch(io.Discard, samples), "the trainer accepts every sample")
}

// TestTrainerConfigKLReference: grpo.kl_beta must act. The trainer's
// default reference is its input checkpoint, whose log-probs equal the
// pre-step policy's, so with the stage's one inner step the k3 term and
// its gradient were exactly 0 whatever grpo.kl_beta said. With kl_beta >
// 0 the stage names grpo.base_checkpoint as the reference (DeepSeekMath's
// pi_ref, the initial model); with 0 it loads no reference.
func TestTrainerConfigKLReference(t *testing.T) {
	cfg := config.Default()
	cfg.GRPO.BaseCheckpoint, cfg.GRPO.LR, cfg.GRPO.ClipEps, cfg.GRPO.MaxSeqLen = "tiny:7", 3e-6, 0.28, 4096
	ri := pipeline.RoundInfo{Run: "r", Round: 3, Seed: 11}
	tc := trainerConfig(&cfg, ri)
	require.Zero(t, tc.KLBeta)
	require.Empty(t, tc.ReferenceCheckpoint, "no KL: no reference model is loaded")
	require.Equal(t, 3e-6, tc.LR)
	require.Equal(t, 0.28, tc.ClipEpsilon)
	require.Equal(t, 4096, tc.MaxSeqLen)
	require.Equal(t, pipeline.DeriveSeed(11, "grpo", 3), tc.Seed)

	cfg.GRPO.KLBeta = 0.04
	tc = trainerConfig(&cfg, ri)
	require.Equal(t, 0.04, tc.KLBeta)
	require.Equal(t, "tiny:7", tc.ReferenceCheckpoint)
	rest := tc
	rest.KLBeta, rest.ReferenceCheckpoint, rest.LR, rest.ClipEpsilon, rest.MaxSeqLen, rest.Seed = 0, "", 1e-5, 0.2, 8192, 0
	require.Equal(t, DefaultTrainerConfig(), rest, "every other key keeps the default run's value")
}

func TestBuildBatchErrors(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*config.Config, []schemas.Rollout, []schemas.Design)
		want   string
	}{
		{"non-finite return", func(_ *config.Config, p []schemas.Rollout, _ []schemas.Design) { p[0].Return = math.NaN() }, "agent advantages"},
		{"malformed design prompt", func(_ *config.Config, _ []schemas.Rollout, d []schemas.Design) { d[1].Prompt = "{not json" }, "designs row s0 attempt 1: field prompt"},
		{"bad weight rule", func(c *config.Config, _ []schemas.Rollout, _ []schemas.Design) { c.GRPO.WeightRule = "fixed:-2" }, "fixed:-2"},
		{"bad eps", func(c *config.Config, _ []schemas.Rollout, _ []schemas.Design) { c.GRPO.Eps = -1 }, "eps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			plays, labels, designs := batchFixture()
			tc.mutate(&cfg, plays, designs)
			_, _, err := BuildBatch(&cfg, plays, labels, designs)
			require.Error(t, err)
			require.True(t, strings.Contains(err.Error(), tc.want), "error %q should mention %q", err, tc.want)
		})
	}
}

// TestStepMetricRows checks which keys of a trainer step line reach
// train_metrics: the fixed set including micro_batches, the measurements
// only with timings, never a key StepMetrics has no field for, and no row
// for a key the line leaves out.
func TestStepMetricRows(t *testing.T) {
	st, ev, err := ParseMetricsLine([]byte(`{"step":2,"loss":-0.5,"kl":0.01,"clip_fraction":0.1,"grad_norm":2,"tokens":100,"trained_tokens":40,` +
		`"tokens_per_s":1e4,"seconds":0.01,"peak_memory_bytes":123,"lr":1e-6,"micro_batches":3,"new_key":7}`))
	require.NoError(t, err)
	require.False(t, ev)
	rows := stepMetricRows(st, false)
	require.Equal(t, []string{"clip_fraction", "grad_norm", "kl", "loss", "lr", "micro_batches", "tokens", "trained_tokens"}, metricNames(t, 2, rows))
	require.Equal(t, schemas.TrainMetric{Step: 2, Name: "micro_batches", Value: 3}, rows[5])
	rows = stepMetricRows(st, true)
	require.Equal(t, []string{"clip_fraction", "grad_norm", "kl", "loss", "lr", "micro_batches", "peak_memory_bytes", "seconds", "tokens", "tokens_per_s", "trained_tokens"}, metricNames(t, 2, rows))
}

// TestStepMetricRowsNoData: a metric with no data has no train_metrics
// row, never a 0. The project's trainer behind a server that returns no
// log-probs writes the mismatch and tis_clip_fraction as null, and kl as
// null with kl_beta 0; a trainer that writes 0 for them over 0 compared
// tokens gets no row either (a mean over no token); with compared tokens
// every one is stored, 0 included.
func TestStepMetricRowsNoData(t *testing.T) {
	base := `{"step":1,"loss":-0.5,"clip_fraction":0,"grad_norm":2,"tokens":100,"trained_tokens":40,"lr":1e-6,"micro_batches":1,`
	for _, tc := range []struct {
		name, tail string
		want       []string
		values     map[string]float64
	}{
		{"nulls from the project's trainer", `"kl":null,"logprob_mismatch_mean":null,"logprob_mismatch_max":null,"sampler_logprob_tokens":0,"tis_clip_fraction":null,"tokens_per_s":null}`,
			[]string{"clip_fraction", "grad_norm", "loss", "lr", "micro_batches", "sampler_logprob_tokens", "tokens", "trained_tokens"},
			map[string]float64{"sampler_logprob_tokens": 0, "clip_fraction": 0}},
		{"zeros over no compared token", `"kl":0,"logprob_mismatch_mean":0,"logprob_mismatch_max":0,"sampler_logprob_tokens":0,"tis_clip_fraction":0}`,
			[]string{"clip_fraction", "grad_norm", "kl", "loss", "lr", "micro_batches", "sampler_logprob_tokens", "tokens", "trained_tokens"},
			map[string]float64{"kl": 0}},
		{"no count at all", `"logprob_mismatch_mean":0.2,"logprob_mismatch_max":0.5}`,
			[]string{"clip_fraction", "grad_norm", "loss", "lr", "micro_batches", "tokens", "trained_tokens"}, nil},
		{"compared tokens", `"kl":0,"logprob_mismatch_mean":0,"logprob_mismatch_max":0.25,"sampler_logprob_tokens":30,"tis_clip_fraction":0}`,
			[]string{"clip_fraction", "grad_norm", "kl", "logprob_mismatch_max", "logprob_mismatch_mean", "loss", "lr", "micro_batches", "sampler_logprob_tokens", "tis_clip_fraction", "tokens", "trained_tokens"},
			map[string]float64{"logprob_mismatch_mean": 0, "logprob_mismatch_max": 0.25, "sampler_logprob_tokens": 30, "tis_clip_fraction": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _, err := ParseMetricsLine([]byte(base + tc.tail))
			require.NoError(t, err)
			rows := stepMetricRows(st, true)
			require.Equal(t, tc.want, metricNames(t, 1, rows))
			for _, r := range rows {
				if v, ok := tc.values[r.Name]; ok {
					require.Equal(t, v, r.Value, r.Name)
				}
			}
			sum := TrainSummary(append(rows, schemas.TrainMetric{Name: "trained", Value: 1}))
			require.True(t, sum.Trained)
			require.Equal(t, 1, sum.Steps)
			if _, ok := tc.values["logprob_mismatch_mean"]; ok {
				require.Equal(t, 0.0, sum.LogprobMismatchMean, "a measured 0 stays 0")
			} else {
				require.True(t, math.IsNaN(sum.LogprobMismatchMean), "no data reads as NaN, got %v", sum.LogprobMismatchMean)
				require.True(t, math.IsNaN(sum.TISClipFraction))
			}
		})
	}
	// A StepMetrics built in Go (no line) has every key but the
	// mismatch, which needs compared tokens.
	require.NotContains(t, metricNames(t, 0, stepMetricRows(StepMetrics{}, false)), "logprob_mismatch_mean")
	require.Contains(t, metricNames(t, 0, stepMetricRows(StepMetrics{}, false)), "kl")
}

// TestTrainSummary reads a two-step round as the report shows it: means
// over the inner steps, the mismatch of the first step, the step-0 group
// counts and their share; a round of trainer none has steps 0 and NaN
// for every step metric, and a batch without groups no share.
func TestTrainSummary(t *testing.T) {
	row := func(step int64, name string, v float64) schemas.TrainMetric {
		return schemas.TrainMetric{Step: step, Name: name, Value: v}
	}
	sum := TrainSummary([]schemas.TrainMetric{
		row(2, "loss", -0.1), row(1, "loss", 0.3), row(1, "grad_norm", 1), row(2, "grad_norm", 3),
		row(2, "logprob_mismatch_mean", 0.5), row(1, "logprob_mismatch_mean", 0.25), row(1, "clip_fraction", 0), row(2, "clip_fraction", 0.1),
		row(0, "trained", 1), row(0, "agent_groups", 8), row(0, "zero_variance_groups", 2), row(2, "new_name", 7),
	})
	require.True(t, sum.Trained)
	require.Equal(t, 2, sum.Steps)
	require.InDelta(t, 0.1, sum.Loss, 1e-12)
	require.Equal(t, 2.0, sum.GradNorm)
	require.InDelta(t, 0.05, sum.ClipFraction, 1e-12)
	require.Equal(t, 0.25, sum.LogprobMismatchMean, "the first step's")
	require.Equal(t, 0.25, sum.ZeroVarianceShare)
	for name, v := range map[string]float64{"kl": sum.KL, "trained_tokens": sum.TrainedTokens, "logprob_mismatch_max": sum.LogprobMismatchMax, "sampler_logprob_tokens": sum.SamplerLogprobTokens} {
		require.True(t, math.IsNaN(v), "%s = %v, want NaN (no row)", name, v)
	}
	none := TrainSummary([]schemas.TrainMetric{row(0, "trained", 0), row(0, "agent_groups", 0), row(0, "zero_variance_groups", 0)})
	require.False(t, none.Trained)
	require.Zero(t, none.Steps)
	require.True(t, math.IsNaN(none.Loss) && math.IsNaN(none.GradNorm) && math.IsNaN(none.ZeroVarianceShare))
	require.Equal(t, 0.0, none.AgentGroups)
}

// metricNames returns the names of rows, checking each is of step.
func metricNames(t *testing.T, step int64, rows []schemas.TrainMetric) []string {
	t.Helper()
	var out []string
	for _, r := range rows {
		require.EqualValues(t, step, r.Step, r.Name)
		out = append(out, r.Name)
	}
	return out
}

// putCheckpointFile stores data under key and returns its checkpoint row
// entry named name.
func putCheckpointFile(t *testing.T, st storage.Store, name, key string, data []byte) schemas.CheckpointFile {
	t.Helper()
	require.NoError(t, st.PutIfAbsent(context.Background(), key, bytes.NewReader(data), int64(len(data))))
	sum := sha256.Sum256(data)
	return schemas.CheckpointFile{Name: name, Key: key, SHA256: hex.EncodeToString(sum[:]), Bytes: int64(len(data))}
}

// TestFetchCheckpointNested restores a checkpoint with files in
// subdirectories, one sharing its base name with a top-level file: each
// lands at its relative path, so HashCheckpoint of the copy lists the same
// files the stored checkpoint does.
func TestFetchCheckpointNested(t *testing.T) {
	ctx := context.Background()
	st, err := storage.Open(ctx, "mem://"+strings.ReplaceAll(t.Name(), "/", "_"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	ck := schemas.Checkpoint{CheckpointID: "abc"}
	files := map[string]string{
		"config.json":                   `{"model_type":"qwen3"}`,
		"model.safetensors":             "weights",
		"tokenizer/config.json":         `{"nested":true}`,
		"original/shards/a.safetensors": "shard",
	}
	for _, name := range []string{"config.json", "model.safetensors", "original/shards/a.safetensors", "tokenizer/config.json"} {
		ck.Files = append(ck.Files, putCheckpointFile(t, st, name, "ck/abc/"+name, []byte(files[name])))
	}
	dir := filepath.Join(t.TempDir(), "parent")
	require.NoError(t, fetchCheckpoint(ctx, st, ck, dir))
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		require.NoError(t, err, name)
		require.Equal(t, want, string(got), name)
	}
	hashed, err := HashCheckpoint(dir)
	require.NoError(t, err)
	require.Len(t, hashed, len(ck.Files))
	for i, f := range hashed {
		require.Equal(t, ck.Files[i].Name, f.Name)
		require.Equal(t, ck.Files[i].SHA256, f.SHA256, f.Name)
	}
}

// TestFetchCheckpointBadNames refuses a checkpoint row whose file names
// would land outside the directory or collide, before writing anything.
func TestFetchCheckpointBadNames(t *testing.T) {
	ctx := context.Background()
	st, err := storage.Open(ctx, "mem://"+strings.ReplaceAll(t.Name(), "/", "_"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = st.Close() })
	good := putCheckpointFile(t, st, "config.json", "ck/x/config.json", []byte("{}"))
	for _, tc := range []struct{ name, want string }{
		{"../escape", "clean relative"},
		{"a/../../escape", "clean relative"},
		{"/etc/escape", "clean relative"},
		{"", "clean relative"},
		{".", "directory itself"},
		{"./config.json", "clean relative"},
		{"a//b", "clean relative"},
		{"config.json", "listed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := good
			bad.Name = tc.name
			top := t.TempDir()
			dir := filepath.Join(top, "parent")
			err := fetchCheckpoint(ctx, st, schemas.Checkpoint{CheckpointID: "x", Files: []schemas.CheckpointFile{good, bad}}, dir)
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "checkpoint x")
			entries, err := os.ReadDir(top)
			require.NoError(t, err)
			require.Empty(t, entries, "nothing is written for a refused checkpoint")
		})
	}
}

// TestSameContent: a rerun of the grpo stage whose checkpoint files are
// already in the store (an earlier attempt stored them, then died before
// the commit) keeps them only if their sha256 is the trained one; the
// "already exists" answer used to be accepted without reading them.
func TestSameContent(t *testing.T) {
	ctx := context.Background()
	s, err := storage.Open(ctx, "mem://"+t.Name())
	require.NoError(t, err)
	data := []byte("model weights")
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:])
	require.NoError(t, storage.PutBytes(ctx, s, "ck/model.safetensors", data))
	require.NoError(t, sameContent(ctx, s, "ck/model.safetensors", want))
	require.NoError(t, storage.PutBytes(ctx, s, "ck/changed.safetensors", []byte("other weights")))
	err = sameContent(ctx, s, "ck/changed.safetensors", want)
	require.ErrorContains(t, err, "ck/changed.safetensors is already in the store with sha256")
	require.ErrorIs(t, sameContent(ctx, s, "ck/missing", want), storage.ErrNotFound)
}

// TestBuildBatchUnmeasuredFinalAttempt: the final attempt of a slot whose
// label has no designer reward (a valid environment whose hint call
// failed, so no regret) is not a sample; before, it fell through to the
// -1 of an attempt without a label. A slot with no label at all (a
// repeated source) still gets -1, and earlier attempts keep their -1.
func TestBuildBatchUnmeasuredFinalAttempt(t *testing.T) {
	cfg := config.Default()
	labels := []schemas.Label{{EnvID: "e", SlotID: "s0", Skill: "planning", Valid: true, Admitted: true}}
	designs := []schemas.Design{
		design("s0", "planning", 0, false, "quick check reset: timeout", "code"),
		design("s0", "planning", 1, true, "", "code"),
		design("s1", "planning", 0, true, "", "code"),
	}
	batch, _, err := BuildBatch(&cfg, nil, labels, designs)
	require.NoError(t, err)
	var ids []string
	for _, s := range batch {
		ids = append(ids, s.SampleID)
		require.Equal(t, -1.0, s.Reward, s.SampleID)
	}
	require.Equal(t, []string{"designer-s0-0", "designer-s1-0"}, ids)
}

// TestDesignerRound checks which round's designs grpo(r) trains: with
// k = 4 and delay 4, round 5 trains round 1's and round 9 round 5's;
// rounds 1..4 and 6..8 train none; a frozen designer never trains any.
func TestDesignerRound(t *testing.T) {
	cfg := config.Default()
	cfg.RegenerateEvery = 4
	ri := func(r int) pipeline.RoundInfo { return pipeline.NewRoundInfo("x", r, &cfg) }
	for r := 1; r <= 9; r++ {
		s, ok := DesignerRound(ri(r), &cfg)
		require.Equal(t, r == 1 || r == 5 || r == 9, ok, "delay 0, round %d", r)
		if ok {
			require.Equal(t, r, s)
		}
	}
	cfg.GRPO.DesignerDelay = 4
	for r := 1; r <= 9; r++ {
		s, ok := DesignerRound(ri(r), &cfg)
		require.Equal(t, r == 5 || r == 9, ok, "delay 4, round %d", r)
		if ok {
			require.Equal(t, r-4, s)
		}
	}
	cfg.GRPO.DesignerDelay = 2
	s, ok := DesignerRound(ri(3), &cfg)
	require.True(t, ok)
	require.Equal(t, 1, s)
	cfg.Ablation.FrozenDesigner = true
	_, ok = DesignerRound(ri(3), &cfg)
	require.False(t, ok)
}

// TestDelayedLabels recomputes blend rewards over a window of 4 rounds by
// hand. Environment a (range [0, 1]) has win rates 0.25, 0.5, 0.5, 0.75
// (window mean 0.5, plateau 1) and round-1 regret 0.03 (0.2 of the 0.15
// scale): 0.6 + 0.08 = 0.68. Environment b (range [0, 2]) was not
// admitted, so the window has round 1 only: win rate 0.25 (plateau 0.4),
// regret 0.6 / 2 = 0.3, over the scale, clipped to 1: 0.24 + 0.4 = 0.64.
// Environment c is invalid: -1. Environment d has no regret: no reward.
func TestDelayedLabels(t *testing.T) {
	cfg := config.Default()
	cfg.Label.DesignerReward = config.DesignerRewardBlend
	envs := []schemas.Environment{{EnvID: "a", RewardHigh: 1}, {EnvID: "b", RewardHigh: 2}, {EnvID: "c", RewardHigh: 1}, {EnvID: "d", RewardHigh: 1}}
	lab := func(env string, wr float64, regret *float64) schemas.Label {
		return schemas.Label{EnvID: env, SlotID: "s-" + env, Skill: "k", Valid: env != "c", Plays: 8, WinRate: wr, Regret: regret}
	}
	p := func(v float64) *float64 { return &v }
	window := [][]schemas.Label{
		{lab("a", 0.25, p(0.03)), lab("b", 0.25, p(0.6)), lab("c", 0, nil), lab("d", 0.5, nil)},
		{lab("a", 0.5, nil)},
		{lab("a", 0.5, nil)},
		{lab("a", 0.75, nil)},
	}
	got := DelayedLabels(&cfg, envs, window, nil)
	require.Len(t, got, 4)
	want := map[string]*float64{"a": p(0.68), "b": p(0.64), "c": p(-1), "d": nil}
	for _, l := range got {
		if want[l.EnvID] == nil {
			require.Nil(t, l.DesignerReward, l.EnvID)
			continue
		}
		require.NotNil(t, l.DesignerReward, l.EnvID)
		require.InDelta(t, *want[l.EnvID], *l.DesignerReward, 1e-12, l.EnvID)
	}
	// learning_potential over the same window: |0.5 - 0.3| for a.
	cfg.Label.DesignerReward = config.DesignerRewardLearningPotential
	got = DelayedLabels(&cfg, envs, window, map[string]reward.EMA{"k": {Fast: 0.4, Slow: 0.3, Rounds: 2}})
	require.InDelta(t, 0.2, *got[0].DesignerReward, 1e-12)
}

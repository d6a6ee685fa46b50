package roundtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/internal/pyenv"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/stages/grpo"
)

// TestTorchTrainerRounds runs rounds 1..3 with the project's PyTorch GRPO
// trainer on the tiny built-in model: each round registers a new
// checkpoint whose parent is the previous round's, whose files are stored
// and match their sha256, and the next round's rollout manifest lists the
// previous round's checkpoints table among its inputs (the model a round
// plays with is part of its lineage).
func TestTorchTrainerRounds(t *testing.T) {
	cfg, err := loadConfig("torch.yaml")
	require.NoError(t, err)
	cfg.GRPO.Python = pyenv.Require(t, "torch", "transformers")
	ctx := context.Background()
	f, err := newFixture(ctx, "torch", "torch", cfg)
	require.NoError(t, err)
	require.NoError(t, runRounds(ctx, f.store, f.run, cfg, 3))

	parent := "base:" + cfg.GRPO.BaseCheckpoint
	seen := map[string]bool{}
	for r := 1; r <= 3; r++ {
		m, err := pipeline.ReadManifest(ctx, f.store, pipeline.ManifestKey(f.run, r, "checkpoints"))
		require.NoError(t, err)
		cks, err := pipeline.ReadManifestRows(ctx, f.store, schemas.Checkpoints, m)
		require.NoError(t, err)
		require.Len(t, cks, 1, "round %d registers one checkpoint", r)
		ck := cks[0]
		require.False(t, seen[ck.CheckpointID], "round %d reuses checkpoint %s", r, ck.CheckpointID)
		seen[ck.CheckpointID] = true
		require.Equal(t, parent, ck.Parent, "round %d: parent is the previous round's checkpoint", r)
		require.EqualValues(t, r, ck.TrainedRound)
		require.Equal(t, "torch", ck.Trainer)

		names := map[string]bool{}
		for _, file := range ck.Files {
			names[file.Name] = true
			data, err := pipeline.ReadVerified(ctx, f.store, pipeline.FileEntry{Key: file.Key, SHA256: file.SHA256, Bytes: file.Bytes})
			require.NoError(t, err, "round %d checkpoint file %s", r, file.Key)
			sum := sha256.Sum256(data)
			require.Equal(t, file.SHA256, hex.EncodeToString(sum[:]), "round %d checkpoint file %s", r, file.Key)
			require.EqualValues(t, file.Bytes, len(data))
		}
		require.True(t, names["config.json"] && names["model.safetensors"], "round %d checkpoint files: %v", r, names)

		metrics, err := pipeline.ReadManifest(ctx, f.store, pipeline.ManifestKey(f.run, r, "train_metrics"))
		require.NoError(t, err)
		tm, err := pipeline.ReadManifestRows(ctx, f.store, schemas.TrainMetrics, metrics)
		require.NoError(t, err)
		trained, microBatches := false, false
		for _, x := range tm {
			if x.Name == "trained" && x.Value == 1 {
				trained = true
			}
			if x.Name == "micro_batches" && x.Step >= 1 && x.Value >= 1 {
				microBatches = true
			}
		}
		require.True(t, trained, "round %d did not train", r)
		require.True(t, microBatches, "round %d: train_metrics lacks the trainer's micro_batches", r)

		ro, err := pipeline.ReadManifest(ctx, f.store, pipeline.ManifestKey(f.run, r, "rollouts"))
		require.NoError(t, err)
		var in *pipeline.InputRef
		for i := range ro.Inputs {
			if ro.Inputs[i].Table == "checkpoints" {
				in = &ro.Inputs[i]
			}
		}
		require.NotNil(t, in, "round %d rollouts do not list a checkpoints input: %+v", r, ro.Inputs)
		require.Equal(t, r-1, in.Round)
		if r > 1 {
			prev, err := pipeline.ReadManifest(ctx, f.store, pipeline.ManifestKey(f.run, r-1, "checkpoints"))
			require.NoError(t, err)
			require.Equal(t, pipeline.ManifestKey(f.run, r-1, "checkpoints"), in.Key)
			require.Equal(t, prev.ContentDigest(), in.Digest, "round %d rollouts pin round %d's checkpoints", r, r-1)
		}
		parent = ck.CheckpointID
	}
	torchNoDataIsNull(ctx, t, f)
}

// torchNoDataIsNull checks, in DuckDB over the run's train_metrics, that
// what the trainer could not measure is NULL there, not 0: the
// procedural model returns no log-probs, so no trained token has a
// sampler log-prob (sampler_logprob_tokens 0) and the log-prob mismatch
// and tis_clip_fraction have no value; kl_beta is 0, so kl is not
// computed. What was measured (loss, trained_tokens) is there. The
// report's summary of the same rows reads them as NaN ("no data").
func torchNoDataIsNull(ctx context.Context, t *testing.T, f *fixture) {
	require.Zero(t, f.cfg.GRPO.KLBeta)
	db, err := f.openSQL(ctx, f.run)
	require.NoError(t, err)
	defer db.Close()
	_, got := rows(t, db, `select round, step,
		max(value) filter (where name = 'sampler_logprob_tokens'),
		max(value) filter (where name = 'logprob_mismatch_mean'),
		max(value) filter (where name = 'logprob_mismatch_max'),
		max(value) filter (where name = 'tis_clip_fraction'),
		max(value) filter (where name = 'kl'),
		count(*) filter (where name in ('loss', 'trained_tokens') and value is not null)
		from train_metrics where step >= 1 group by round, step order by round, step`)
	require.Len(t, got, 3, "one inner step in each of rounds 1-3")
	for i, r := range got {
		require.Equal(t, []string{fmt.Sprint(i + 1), "1", "0", "NULL", "NULL", "NULL", "NULL", "2"}, r,
			"round, step, sampler_logprob_tokens, logprob_mismatch_mean, _max, tis_clip_fraction, kl, measured loss and trained_tokens")
	}
	m, err := pipeline.ReadManifest(ctx, f.store, pipeline.ManifestKey(f.run, 1, "train_metrics"))
	require.NoError(t, err)
	tm, err := pipeline.ReadManifestRows(ctx, f.store, schemas.TrainMetrics, m)
	require.NoError(t, err)
	sum := grpo.TrainSummary(tm)
	require.True(t, sum.Trained)
	require.True(t, math.IsNaN(sum.LogprobMismatchMean) && math.IsNaN(sum.KL), "mismatch %v, kl %v: want no data", sum.LogprobMismatchMean, sum.KL)
	require.False(t, math.IsNaN(sum.Loss))
}

// TestTorchTrainerHFCheckpoint runs round 1 with the PyTorch trainer on a
// real transformers checkpoint, SmolLM2-135M-Instruct (Llama architecture,
// loaded with AutoModelForCausalLM; tokenizer and ChatML chat template from
// the checkpoint): the round registers a checkpoint whose parent is the
// base, whose stored files are Hugging Face safetensors with the
// checkpoint's tokenizer files, and which transformers loads again
// (AutoModelForCausalLM and AutoTokenizer) with weights that differ from
// the base's (the step moved them).
func TestTorchTrainerHFCheckpoint(t *testing.T) {
	py := pyenv.Require(t, "torch", "transformers")
	base := pyenv.RequireModel(t, "smollm2-135m-instruct")
	cfg, err := loadConfig("smollm2.yaml")
	require.NoError(t, err)
	cfg.GRPO.BaseCheckpoint = base
	cfg.GRPO.Python = py
	ctx := context.Background()
	f, err := newFixture(ctx, "smollm2", "smollm2", cfg)
	require.NoError(t, err)
	require.NoError(t, runRounds(ctx, f.store, f.run, cfg, 1))

	m, err := pipeline.ReadManifest(ctx, f.store, pipeline.ManifestKey(f.run, 1, "checkpoints"))
	require.NoError(t, err)
	cks, err := pipeline.ReadManifestRows(ctx, f.store, schemas.Checkpoints, m)
	require.NoError(t, err)
	require.Len(t, cks, 1)
	ck := cks[0]
	require.Equal(t, "base:"+base, ck.Parent)
	require.Equal(t, "torch", ck.Trainer)
	metrics, err := pipeline.ReadManifest(ctx, f.store, pipeline.ManifestKey(f.run, 1, "train_metrics"))
	require.NoError(t, err)
	tm, err := pipeline.ReadManifestRows(ctx, f.store, schemas.TrainMetrics, metrics)
	require.NoError(t, err)
	gradNorm := 0.0
	for _, x := range tm {
		if x.Name == "grad_norm" && x.Step == 1 {
			gradNorm = x.Value
		}
	}
	require.Greater(t, gradNorm, 0.0, "the batch (seed 1) has non-zero advantages, so the step has a gradient")
	dir := t.TempDir()
	names := map[string]bool{}
	for _, file := range ck.Files {
		names[file.Name] = true
		data, err := pipeline.ReadVerified(ctx, f.store, pipeline.FileEntry{Key: file.Key, SHA256: file.SHA256, Bytes: file.Bytes})
		require.NoError(t, err, file.Key)
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, file.Name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, file.Name), data, 0o644))
	}
	for _, want := range []string{"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "spade_checkpoint.json"} {
		require.True(t, names[want], "checkpoint lacks %s: %v", want, names)
	}
	// transformers loads the trained checkpoint as the serving side does,
	// and its weights moved away from the base's.
	check := `
import sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
new, base = sys.argv[1], sys.argv[2]
tok = AutoTokenizer.from_pretrained(new)
assert tok.chat_template, "no chat template"
m = AutoModelForCausalLM.from_pretrained(new)
b = AutoModelForCausalLM.from_pretrained(base)
assert type(m).__name__ == "LlamaForCausalLM", type(m).__name__
diff = max(float((p - q).abs().max()) for p, q in zip(m.state_dict().values(), b.state_dict().values()))
assert 0 < diff < 1, diff
ids = tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True, return_tensors="pt")
ids = ids["input_ids"] if hasattr(ids, "keys") else ids
out = m(ids).logits
assert torch.isfinite(out).all()
print("ok", diff)
`
	cmd := exec.Command(py, "-c", check, dir, base)
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "ok")
}

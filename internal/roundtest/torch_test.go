package roundtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/schemas"
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
	if out, err := exec.Command(cfg.GRPO.Python, "-c", "import torch").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import torch (install Debian's python3-torch): %v\n%s", cfg.GRPO.Python, err, out)
	}
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
}

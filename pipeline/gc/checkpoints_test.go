package gc_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/gc"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/memstore"
)

func TestParseKeepRule(t *testing.T) {
	r, err := gc.ParseKeepRule("last:3,every:10")
	require.NoError(t, err)
	require.Equal(t, 3, r.Last)
	require.Equal(t, 10, r.Every)
	for _, bad := range []string{"", "last", "last:0", "last:-1", "last:03", "every:x", "keep:2", "all:2", "last:1,last:2"} {
		_, err := gc.ParseKeepRule(bad)
		require.Error(t, err, bad)
		require.Contains(t, err.Error(), "--keep-checkpoints", bad)
	}
}

// TestCollectCheckpoints: checkpoint retention (issue 24, point 6). Run
// src has rounds 0..5 sealed, a checkpoint with weights and optimizer
// state in rounds 1..5 and one in round 6, which is not sealed; fork
// forks src at round 2. gc without a rule removes only the optimizer
// state of the rounds older than the last grpo.keep_optimizer_rounds (1)
// except the fork round; gc --keep-checkpoints last:1 then removes the
// weights of rounds 1, 3 and 4. The last sealed round (5), the unsealed
// round (6) and the fork round (2) keep everything. A read of a removed
// file names gc's rule; a fork that trains from a removed checkpoint is
// refused.
func TestCollectCheckpoints(t *testing.T) {
	ctx := context.Background()
	s, clk := sealedSrc(t, 5)
	fork := runner(s, "fork", 4)
	_, err := pipeline.Fork(ctx, s, pipeline.ForkOptions{Source: "src", Round: 2, Target: "fork", Config: fork.Config})
	require.NoError(t, err)
	files := map[int][2]pipeline.FileEntry{} // weights, optimizer
	for r := 1; r <= 6; r++ {
		var pair [2]pipeline.FileEntry
		for i, name := range []string{"model.safetensors", "optimizer/__0_0.distcp"} {
			body := []byte(fmt.Sprintf("round %d %s", r, name))
			sum := sha256.Sum256(body)
			key := fmt.Sprintf("src/round=%06d/checkpoints/files/ck%d/%s", r, r, name)
			require.NoError(t, storage.PutBytes(ctx, s, key, body))
			pair[i] = pipeline.FileEntry{Key: key, SHA256: hex.EncodeToString(sum[:]), Bytes: int64(len(body))}
		}
		files[r] = pair
	}
	clk.set(clk.now().Add(48 * time.Hour))
	opts := gc.Options{Run: "src", Grace: time.Hour, Now: clk.now}

	byKind := func(res *gc.Result, kind gc.Kind) []string {
		var out []string
		for _, o := range res.Garbage {
			if o.Kind == kind && o.Deleted {
				out = append(out, o.Key)
			}
		}
		sort.Strings(out)
		return out
	}
	res, err := gc.Collect(ctx, s, opts)
	require.NoError(t, err)
	require.Equal(t, []string{files[1][1].Key, files[3][1].Key, files[4][1].Key}, byKind(res, gc.KindOptimizer))
	require.Empty(t, byKind(res, gc.KindWeights))

	rule, err := gc.ParseKeepRule("last:1")
	require.NoError(t, err)
	opts.KeepCheckpoints = &rule
	res, err = gc.Collect(ctx, s, opts)
	require.NoError(t, err)
	require.Equal(t, []string{files[1][0].Key, files[3][0].Key, files[4][0].Key}, byKind(res, gc.KindWeights))

	for r, pair := range files {
		removed := r == 1 || r == 3 || r == 4
		for i, f := range pair {
			data, err := pipeline.ReadCheckpointFile(ctx, s, f)
			if !removed {
				require.NoError(t, err, "round %d file %d", r, i)
				require.Equal(t, f.Bytes, int64(len(data)))
				continue
			}
			require.ErrorIs(t, err, pipeline.ErrRemovedByGC, "round %d file %d", r, i)
			require.Contains(t, err.Error(), fmt.Sprintf("checkpoint ck%d", r))
			if i == 0 {
				require.Contains(t, err.Error(), `rule "last:1"`)
			} else if r == 1 {
				require.Contains(t, err.Error(), "grpo.keep_optimizer_rounds = 1")
			}
		}
	}
	m, err := pipeline.ReadRemoval(ctx, s, "src/round=000004/checkpoints/_REMOVED.json")
	require.NoError(t, err)
	require.True(t, m.Weights && m.Optimizer)
	require.Equal(t, []string{files[4][0].Key, files[4][1].Key}, m.Keys)

	// A third pass finds nothing more; a fork that trains from a removed
	// checkpoint is refused, one that does not train is made.
	res, err = gc.Collect(ctx, s, opts)
	require.NoError(t, err)
	require.Empty(t, byKind(res, gc.KindWeights))
	require.Empty(t, byKind(res, gc.KindOptimizer))
	trains := fork.Config
	trains.GRPO.Trainer = "torch"
	_, err = pipeline.Fork(ctx, s, pipeline.ForkOptions{Source: "src", Round: 3, Target: "trains", Config: trains})
	require.ErrorIs(t, err, pipeline.ErrRemovedByGC)
	_, err = pipeline.Fork(ctx, s, pipeline.ForkOptions{Source: "src", Round: 3, Target: "replays", Config: fork.Config})
	require.NoError(t, err)
}

// TestCollectKeepsACarriedCheckpoint: rounds 2 and 3 did not train, so
// their checkpoint is round 1's, whose files lie in round 1's directory.
// Neither the optimizer rule nor a weights rule that keeps no round
// (every:10) removes them: they are the policy of round 4.
func TestCollectKeepsACarriedCheckpoint(t *testing.T) {
	ctx := context.Background()
	s, clk := sealedSrc(t, 3)
	for _, name := range []string{"model.safetensors", "optimizer/__0_0.distcp"} {
		require.NoError(t, storage.PutBytes(ctx, s, "src/round=000001/checkpoints/files/ck1/"+name, []byte(name)))
	}
	clk.set(clk.now().Add(48 * time.Hour))
	rule, err := gc.ParseKeepRule("every:10")
	require.NoError(t, err)
	res, err := gc.Collect(ctx, s, gc.Options{Run: "src", Grace: time.Hour, Now: clk.now, KeepCheckpoints: &rule})
	require.NoError(t, err)
	for _, o := range res.Garbage {
		require.NotContains(t, o.Key, "/checkpoints/", "the carried checkpoint is the next round's policy")
	}
}

// sealedSrc returns a memory store, on a settable clock, holding run src
// with rounds 0..last sealed.
func sealedSrc(t *testing.T, last int) (*memstore.Store, *clock) {
	t.Helper()
	s := memstore.New(t.Name())
	t.Cleanup(func() { memstore.Forget(t.Name()) })
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	s.SetClock(clk.now)
	src := runner(s, "src", 3)
	for r := 0; r <= last; r++ {
		_, err := src.RunRound(context.Background(), r)
		require.NoError(t, err)
	}
	return s, clk
}

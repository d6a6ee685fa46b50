package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/filestore"
	"github.com/spade-pipeline/spade/pipeline/storage/memstore"
)

// chainStore returns a mem:// store holding rounds 0..2 of run "src" of
// the fork test stages (corpus at round 0; metrics and memory_ref after).
func chainStore(t *testing.T) storage.Store {
	t.Helper()
	s := memstore.New(t.Name())
	t.Cleanup(func() { memstore.Forget(t.Name()) })
	runRounds(t, forkRunner(s, "src", 3), 0, 1, 2)
	return s
}

func editJSON(t *testing.T, s storage.Store, key string, edit func(map[string]any)) {
	t.Helper()
	ctx := context.Background()
	b, err := storage.ReadAll(ctx, s, key)
	require.NoError(t, err)
	var v map[string]any
	require.NoError(t, json.Unmarshal(b, &v))
	edit(v)
	b, err = json.MarshalIndent(v, "", "  ")
	require.NoError(t, err)
	require.NoError(t, storage.PutBytes(ctx, s, key, b))
}

// TestRoundVerifiesTheChain: round 3 refuses to build on rounds whose seals
// and manifests disagree, naming the file and what disagrees, and writes
// nothing (ErrIntegrity); the intact run commits round 3.
func TestRoundVerifiesTheChain(t *testing.T) {
	ctx := context.Background()
	seal2, seal1 := pipeline.SealKey("src", 2), pipeline.SealKey("src", 1)
	metrics2 := pipeline.ManifestKey("src", 2, "metrics")
	cases := []struct {
		name   string
		damage func(t *testing.T, s storage.Store)
		want   []string // substrings of the error
	}{
		{"(a) a table digest of a seal edited", func(t *testing.T, s storage.Store) {
			editJSON(t, s, seal2, func(v map[string]any) {
				v["tables"].(map[string]any)["metrics"] = strings.Repeat("ab", 32)
			})
		}, []string{metrics2, "content digest", seal2, "records abababababab for table metrics"}},
		{"(b) a manifest's rows edited, totals consistent", func(t *testing.T, s storage.Store) {
			editJSON(t, s, metrics2, func(v map[string]any) {
				f := v["files"].([]any)[0].(map[string]any)
				v["rows"] = v["rows"].(float64) - f["rows"].(float64) + 999
				f["rows"] = 999
			})
		}, []string{metrics2, "content digest", "but " + seal2 + " records"}},
		{"(b) a manifest's total rows edited", func(t *testing.T, s storage.Store) {
			editJSON(t, s, metrics2, func(v map[string]any) { v["rows"] = 999 })
		}, []string{metrics2, "rows/bytes totals (999,", "listed in " + seal2}},
		{"(c) a manifest truncated to malformed JSON", func(t *testing.T, s storage.Store) {
			b, err := storage.ReadAll(ctx, s, metrics2)
			require.NoError(t, err)
			require.NoError(t, storage.PutBytes(ctx, s, metrics2, b[:len(b)/2]))
		}, []string{metrics2, "malformed JSON", "listed in " + seal2}},
		{"(d) the seal of an earlier round deleted", func(t *testing.T, s storage.Store) {
			require.NoError(t, s.Delete(ctx, seal1))
		}, []string{seal1 + " is missing, but round 2 is sealed", "spade round 1 writes it again"}},
		{"a parent edited", func(t *testing.T, s storage.Store) {
			editJSON(t, s, seal2, func(v map[string]any) { v["parent"] = strings.Repeat("0", 64) })
		}, []string{seal2, "parent 000000000000 is not the round id", "of " + seal1}},
		{"a seal of round 0 with a parent", func(t *testing.T, s storage.Store) {
			editJSON(t, s, pipeline.SealKey("src", 0), func(v map[string]any) { v["parent"] = "x" })
		}, []string{pipeline.SealKey("src", 0), "round 0 has parent x"}},
		{"a seal naming another round", func(t *testing.T, s storage.Store) {
			editJSON(t, s, seal1, func(v map[string]any) { v["round"] = 2 })
		}, []string{seal1, "it says round 2"}},
		{"a malformed seal", func(t *testing.T, s storage.Store) {
			require.NoError(t, storage.PutBytes(ctx, s, seal1, []byte(`{"format_version": 1, "tables": `)))
		}, []string{seal1, "malformed JSON"}},
		{"a listed manifest deleted", func(t *testing.T, s storage.Store) {
			require.NoError(t, s.Delete(ctx, pipeline.ManifestKey("src", 1, "memory_ref")))
		}, []string{pipeline.ManifestKey("src", 1, "memory_ref") + ", listed in " + seal1 + ", is missing"}},
		{"a seal listing another manifest key", func(t *testing.T, s storage.Store) {
			editJSON(t, s, seal1, func(v map[string]any) {
				v["manifests"].(map[string]any)["metrics"] = pipeline.ManifestKey("other", 1, "metrics")
			})
		}, []string{seal1, "table metrics's manifest is listed as other/"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := chainStore(t)
			c.damage(t, s)
			before, err := s.List(ctx, "")
			require.NoError(t, err)
			_, err = forkRunner(s, "src", 3).RunRound(ctx, 3)
			require.ErrorIs(t, err, pipeline.ErrIntegrity)
			require.Contains(t, err.Error(), "round 3 cannot build on rounds 0..2 of run src")
			for _, w := range c.want {
				require.Contains(t, err.Error(), w)
			}
			after, err := s.List(ctx, "")
			require.NoError(t, err)
			require.Equal(t, len(before), len(after), "nothing written")
		})
	}

	t.Run("an intact chain and another format version", func(t *testing.T) {
		s := chainStore(t)
		require.NoError(t, pipeline.VerifyChain(ctx, s, "src", 2))
		runRounds(t, forkRunner(s, "src", 3), 3)
		editJSON(t, s, metrics2, func(v map[string]any) { v["format_version"] = 2 })
		_, err := forkRunner(s, "src", 3).RunRound(ctx, 4)
		require.ErrorIs(t, err, pipeline.ErrUnknownVersion)
		require.Contains(t, err.Error(), metrics2)
	})

	t.Run("the round before missing is not committed", func(t *testing.T) {
		s := chainStore(t)
		require.NoError(t, s.Delete(ctx, seal2))
		_, err := forkRunner(s, "src", 3).RunRound(ctx, 3)
		require.ErrorIs(t, err, pipeline.ErrNotCommitted)
		require.NotErrorIs(t, err, pipeline.ErrIntegrity)
		require.ErrorIs(t, pipeline.VerifyChain(ctx, s, "src", 2), pipeline.ErrNotCommitted)
	})
}

// failingStore fails every PutIfAbsent from the n-th one on, as a process
// killed before that write would leave the store.
type failingStore struct {
	storage.Store
	n, puts int
}

var errKilled = errors.New("killed")

func (f *failingStore) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	f.puts++
	if f.n > 0 && f.puts >= f.n {
		return fmt.Errorf("put %s: %w", key, errKilled)
	}
	return f.Store.PutIfAbsent(ctx, key, r, size)
}

// TestInterruptedFork interrupts a fork before each of its writes in turn
// (the first is its writer registration in the source run): once the
// fork's run file exists, every later round of the fork is refused
// with ErrIncompleteFork naming the fork to run again, until the same fork
// is run again; then the fork continues like an uninterrupted one.
func TestInterruptedFork(t *testing.T) {
	ctx := context.Background()
	s := chainStore(t)
	opts := pipeline.ForkOptions{Source: "src", Round: 2, Target: "whole", Config: forkRunner(s, "whole", 5).Config}
	count := &failingStore{Store: s}
	_, err := pipeline.Fork(ctx, count, opts)
	require.NoError(t, err)
	runRounds(t, forkRunner(s, "whole", 5), 3)
	want, err := pipeline.ReadSeal(ctx, s, "whole", 3)
	require.NoError(t, err)
	require.Greater(t, count.puts, 5)
	for n := 1; n <= count.puts; n++ {
		t.Run(fmt.Sprintf("killed before write %d of %d", n, count.puts), func(t *testing.T) {
			target := fmt.Sprintf("half%d", n)
			o := opts
			o.Target = target
			_, err := pipeline.Fork(ctx, &failingStore{Store: s, n: n}, o)
			require.ErrorIs(t, err, errKilled)
			fork := forkRunner(s, target, 5)
			for _, round := range []int{1, 3} {
				_, err := fork.RunRound(ctx, round)
				if n <= 2 { // write 1 is the writer registration in src, write 2 the run file
					require.ErrorIs(t, err, pipeline.ErrNotCommitted, "nothing was written")
					continue
				}
				require.ErrorIs(t, err, pipeline.ErrIncompleteFork, "round %d", round)
				require.Contains(t, err.Error(), fmt.Sprintf("run %s is an incomplete fork of src at round 2", target))
				require.Contains(t, err.Error(), fmt.Sprintf("spade fork src --round 2 %s", target))
			}
			if n > 2 {
				rf, err := pipeline.ReadRunFile(ctx, s, target)
				require.NoError(t, err)
				require.ErrorIs(t, pipeline.CheckForkComplete(ctx, s, target, rf), pipeline.ErrIncompleteFork)
			}
			res, err := pipeline.Fork(ctx, s, o)
			require.NoError(t, err, "running the fork again completes it")
			require.False(t, res.Existed, "completing an interrupted fork writes")
			res, err = pipeline.Fork(ctx, s, o)
			require.NoError(t, err)
			require.True(t, res.Existed, "a completed fork run again writes nothing")
			runRounds(t, fork, 3)
			got, err := pipeline.ReadSeal(ctx, s, target, 3)
			require.NoError(t, err)
			require.Equal(t, want.Digest(), got.Digest())
		})
	}
}

// BenchmarkVerifyChain100Rounds measures VerifyChain over 100 rounds of
// 12 tables with 8 files each (100 seals and 1,200 manifests) on the local
// file store, the check RunRound makes before round 101
// (docs/reliability.md quotes it): go test -run '^$' -bench VerifyChain
// ./pipeline/
func BenchmarkVerifyChain100Rounds(b *testing.B) {
	ctx := context.Background()
	s, err := filestore.New(filepath.Join(b.TempDir(), "runs"))
	require.NoError(b, err)
	const rounds, tables, files = 100, 12, 8
	parent := ""
	for r := 0; r < rounds; r++ {
		seal := &pipeline.Seal{FormatVersion: pipeline.FormatVersion, Run: "big", Round: r, Parent: parent, Tables: map[string]string{}, Manifests: map[string]string{}}
		for i := 0; i < tables; i++ {
			table := fmt.Sprintf("t%02d", i)
			m := &pipeline.Manifest{FormatVersion: pipeline.FormatVersion, Run: "big", Round: r, Table: table, SchemaFingerprint: strings.Repeat("f", 64)}
			for p := 0; p < files; p++ {
				sha := fmt.Sprintf("%064x", r*1000+i*10+p)
				m.Files = append(m.Files, pipeline.FileEntry{Key: pipeline.PartKey("big", r, table, p, files, sha), SHA256: sha, Bytes: 1000, Rows: 10, RowGroups: 1, Part: p})
				m.Rows, m.Bytes = m.Rows+10, m.Bytes+1000
			}
			key := pipeline.ManifestKey("big", r, table)
			require.NoError(b, storage.PutBytes(ctx, s, key, m.Encode()))
			seal.Tables[table], seal.Manifests[table] = m.ContentDigest(), key
		}
		data, err := json.Marshal(seal)
		require.NoError(b, err)
		require.NoError(b, storage.PutBytes(ctx, s, pipeline.SealKey("big", r), data))
		parent = seal.Digest()
	}
	for b.Loop() {
		if err := pipeline.VerifyChain(ctx, s, "big", rounds-1); err != nil {
			b.Fatal(err)
		}
	}
}

// TestStageByStageChecks: the path Airflow takes (spade stage, spade
// commit --seal) refuses what RunRound refuses: Seal will not chain a
// round onto rounds that do not verify, and no stage of an interrupted
// fork runs.
func TestStageByStageChecks(t *testing.T) {
	ctx := context.Background()
	t.Run("seal", func(t *testing.T) {
		s := chainStore(t)
		editJSON(t, s, pipeline.SealKey("src", 2), func(v map[string]any) {
			v["tables"].(map[string]any)["metrics"] = strings.Repeat("ab", 32)
		})
		_, err := forkRunner(s, "src", 3).Seal(ctx, 3)
		require.ErrorIs(t, err, pipeline.ErrIntegrity)
		require.ErrorContains(t, err, "round 3 cannot build on rounds 0..2 of run src")
		_, err = pipeline.ReadSeal(ctx, s, "src", 3)
		require.ErrorIs(t, err, pipeline.ErrNotCommitted, "no seal written")
	})
	t.Run("stage of an interrupted fork", func(t *testing.T) {
		s := chainStore(t)
		opts := pipeline.ForkOptions{Source: "src", Round: 2, Target: "half", Config: forkRunner(s, "half", 5).Config}
		_, err := pipeline.Fork(ctx, &failingStore{Store: s, n: 3}, opts)
		require.ErrorIs(t, err, errKilled)
		_, err = forkRunner(s, "half", 5).RunStage(ctx, 3, "walk", pipeline.Shard{Index: 0, Count: 1}, true)
		require.ErrorIs(t, err, pipeline.ErrIncompleteFork)
	})
}

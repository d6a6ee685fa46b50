package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/internal/testutil/s3server"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	_ "github.com/spade-pipeline/spade/pipeline/storage/memstore"
	_ "github.com/spade-pipeline/spade/pipeline/storage/s3store"
	"github.com/spade-pipeline/spade/pipeline/table"
	"github.com/spade-pipeline/spade/schemas"
)

// gen writes `rows` metrics rows spread over `parts` parts at every round.
type gen struct {
	parts, rows int
	failPart    int // fail this part once (-1: never)
	failed      atomic.Bool
	runs        atomic.Int64
}

func (g *gen) Name() string               { return "gen" }
func (g *gen) Outputs() []pipeline.Output { return []pipeline.Output{{Table: "metrics"}} }
func (g *gen) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	if ri.Round == 0 {
		return nil, false
	}
	var ins []pipeline.Input
	if ri.Round > 1 {
		ins = append(ins, pipeline.Input{Table: "metrics", Round: ri.Round - 1})
	}
	return ins, true
}
func (g *gen) ConfigSubset(c *config.Config) any                 { return c.Sample.Slots }
func (g *gen) Parts(context.Context, *pipeline.Env) (int, error) { return g.parts, nil }
func (g *gen) Run(ctx context.Context, env *pipeline.Env, part int, out *pipeline.Out) error {
	g.runs.Add(1)
	if part == g.failPart && !g.failed.Load() {
		g.failed.Store(true)
		return errors.New("injected failure")
	}
	var prev float64
	if env.Round.Round > 1 {
		rows, err := pipeline.ReadAll(ctx, env, schemas.Metrics, "metrics", env.Round.Round-1)
		if err != nil {
			return err
		}
		prev = float64(len(rows))
	}
	for i := part; i < g.rows; i += g.parts {
		pipeline.Emit(out, schemas.Metrics, "metrics", schemas.Metric{Name: fmt.Sprintf("m%05d", i), Skill: "s", Value: prev + float64(i*env.Round.Round)})
	}
	return nil
}

// sum is a second stage reading gen's output of the same round.
type sum struct{}

func (sum) Name() string               { return "sum" }
func (sum) Outputs() []pipeline.Output { return []pipeline.Output{{Table: "train_metrics"}} }
func (sum) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	return []pipeline.Input{{Table: "metrics", Round: ri.Round}}, ri.Round > 0
}
func (sum) ConfigSubset(*config.Config) any                   { return nil }
func (sum) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }
func (sum) Run(ctx context.Context, env *pipeline.Env, _ int, out *pipeline.Out) error {
	rows, err := pipeline.ReadAll(ctx, env, schemas.Metrics, "metrics", env.Round.Round)
	if err != nil {
		return err
	}
	var total float64
	for _, r := range rows {
		total += r.Value
	}
	pipeline.Emit(out, schemas.TrainMetrics, "train_metrics", schemas.TrainMetric{Step: int64(env.Round.Round), Name: "total", Value: total})
	return nil
}

func newRunner(t *testing.T, st storage.Store, run string, g *gen) *pipeline.Runner {
	cfg := config.Default()
	cfg.Workers = 3
	// sum is registered first: the runner must order it after gen.
	return &pipeline.Runner{Store: st, Run: run, Config: cfg, Stages: []pipeline.Stage{sum{}, g}}
}

func memStore(t *testing.T) storage.Store {
	st, err := storage.Open(context.Background(), "mem://"+strings.ReplaceAll(t.Name(), "/", "_"))
	require.NoError(t, err)
	return st
}

// digests returns every data file's key -> sha256 of a run's rounds.
func digests(t *testing.T, st storage.Store, run string, rounds int) map[string]string {
	out := map[string]string{}
	for r := 1; r <= rounds; r++ {
		for _, table := range []string{"metrics", "train_metrics"} {
			m, err := pipeline.ReadManifest(context.Background(), st, pipeline.ManifestKey(run, r, table))
			require.NoError(t, err)
			out[fmt.Sprintf("%d/%s", r, table)] = m.ContentDigest()
		}
	}
	return out
}

func TestRoundCommitSkipAndResume(t *testing.T) {
	ctx := context.Background()
	st := memStore(t)
	g := &gen{parts: 5, rows: 40, failPart: 3}
	r := newRunner(t, st, "a", g)
	_, err := r.RunRound(ctx, 0)
	require.NoError(t, err)
	_, err = r.RunRound(ctx, 1)
	require.ErrorContains(t, err, "injected failure")
	_, err = pipeline.ReadManifest(ctx, st, pipeline.ManifestKey("a", 1, "metrics"))
	require.ErrorIs(t, err, storage.ErrNotFound, "a failed stage leaves no manifest")

	before := g.runs.Load()
	res, err := r.RunRound(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"gen", "sum"}, res.Ran)
	require.Less(t, g.runs.Load()-before, int64(5), "resume redoes only missing parts")

	res, err = r.RunRound(ctx, 1)
	require.NoError(t, err)
	require.True(t, res.AlreadySealed)

	_, err = r.RunRound(ctx, 3)
	require.ErrorIs(t, err, pipeline.ErrNotCommitted, "round 3 needs round 2")

	_, err = r.RunRound(ctx, 2)
	require.NoError(t, err)
	s2, err := pipeline.ReadSeal(ctx, st, "a", 2)
	require.NoError(t, err)
	s1, err := pipeline.ReadSeal(ctx, st, "a", 1)
	require.NoError(t, err)
	require.Equal(t, s1.Digest(), s2.Parent, "seals form a hash chain")

	// Same config and seed in another run: byte-identical tables.
	g2 := &gen{parts: 5, rows: 40, failPart: -1}
	r2 := newRunner(t, st, "b", g2)
	for n := 0; n <= 2; n++ {
		_, err := r2.RunRound(ctx, n)
		require.NoError(t, err)
	}
	require.Equal(t, digests(t, st, "a", 2), digests(t, st, "b", 2))
}

func TestConfigConflict(t *testing.T) {
	ctx := context.Background()
	st := memStore(t)
	r := newRunner(t, st, "a", &gen{parts: 1, rows: 3, failPart: -1})
	_, err := r.RunRound(ctx, 0)
	require.NoError(t, err)
	r.Config.Sample.Slots = 7
	_, err = r.RunRound(ctx, 1)
	require.ErrorIs(t, err, pipeline.ErrConflict)
	require.ErrorContains(t, err, "sample.slots 24 -> 7")
}

// wholeConfig is gen whose output depends, by its own account, on the
// whole config it is given.
type wholeConfig struct{ *gen }

func (w wholeConfig) ConfigSubset(c *config.Config) any { return *c }

// TestOperationalSettingsResume: a round whose first stage is committed
// resumes with every Operational setting changed (more workers, longer
// timeouts, fewer programs per sandbox) without a fingerprint conflict,
// even for a stage that hashes its whole config.
func TestOperationalSettingsResume(t *testing.T) {
	ctx := context.Background()
	st := memStore(t)
	r := newRunner(t, st, "a", nil)
	r.Stages = []pipeline.Stage{sum{}, wholeConfig{&gen{parts: 2, rows: 6, failPart: -1}}}
	_, err := r.RunRound(ctx, 0)
	require.NoError(t, err)
	_, err = r.RunStage(ctx, 1, "gen", pipeline.Shard{Index: 0, Count: 1}, true)
	require.NoError(t, err)

	r.Config.Workers = 9
	r.Config.Model.Concurrency, r.Config.Model.TimeoutS, r.Config.Model.MaxRetries, r.Config.Model.APIKeyEnv = 5, 999, 0, "OTHER_KEY"
	r.Config.GRPO.TimeoutS = 12345
	r.Config.Sandbox.ProgramsPerSandbox = 1
	res, err := r.RunRound(ctx, 1)
	require.NoError(t, err, "operational settings must not change a stage fingerprint")
	require.Equal(t, []string{"sum"}, res.Ran, "the committed stage is kept")

	// A setting that is not operational still conflicts.
	r.Config.Sandbox.MemoryMB++
	_, err = r.RunStage(ctx, 1, "gen", pipeline.Shard{Index: 0, Count: 1}, true)
	require.ErrorIs(t, err, pipeline.ErrConflict)
}

// TestSealNamesTheUncommittedStage: spade commit --seal before every stage
// is committed fails naming the stage, not only the manifest object that
// was not found.
func TestSealNamesTheUncommittedStage(t *testing.T) {
	ctx := context.Background()
	st := memStore(t)
	r := newRunner(t, st, "a", &gen{parts: 2, rows: 6, failPart: -1})
	_, err := r.RunRound(ctx, 0)
	require.NoError(t, err)
	_, err = r.RunStage(ctx, 1, "gen", pipeline.Shard{Index: 0, Count: 1}, true)
	require.NoError(t, err)
	_, err = r.Seal(ctx, 1)
	require.ErrorIs(t, err, storage.ErrNotFound)
	require.ErrorContains(t, err, "stage sum of round 1 is not committed (table train_metrics)")
	_, err = pipeline.ReadSeal(ctx, st, "a", 1)
	require.ErrorIs(t, err, pipeline.ErrNotCommitted, "nothing sealed")

	_, err = r.RunStage(ctx, 1, "sum", pipeline.Shard{Index: 0, Count: 1}, true)
	require.NoError(t, err)
	_, err = r.Seal(ctx, 1)
	require.NoError(t, err)
}

// TestStageNeedsThePreviousSeal: a round run stage by stage (Kubernetes,
// Slurm) whose previous round was committed but never sealed fails at its
// first stage, before any work, and says "not sealed" with the command
// that seals it; it used to run the whole round and fail only at its own
// seal, saying round 0 was "not committed".
func TestStageNeedsThePreviousSeal(t *testing.T) {
	ctx := context.Background()
	st := memStore(t)
	g := &gen{parts: 2, rows: 6, failPart: -1}
	r := newRunner(t, st, "k8s", g)
	r.Stages = append([]pipeline.Stage{corpus0{}}, r.Stages...)
	one := pipeline.Shard{Index: 0, Count: 1}
	_, err := r.RunStage(ctx, 0, "corpus0", one, true)
	require.NoError(t, err)

	const want0 = "round 1 needs round 0 of run k8s sealed, and it is not sealed (no k8s/round=000000/_ROUND.json): once every stage of round 0 is committed, seal it with `spade commit --round 0 --stage corpus0 --seal`"
	for _, sh := range []pipeline.Shard{one, {Index: 1, Count: 2}} {
		_, err = r.RunStage(ctx, 1, "gen", sh, sh.Count == 1)
		require.ErrorIs(t, err, pipeline.ErrNotCommitted)
		require.EqualError(t, err, want0)
	}
	require.Zero(t, g.runs.Load(), "no part ran")
	written, err := st.List(ctx, pipeline.RoundDir("k8s", 1)+"/")
	require.NoError(t, err)
	require.Empty(t, written, "nothing written at round 1")
	// The seal of round 1 says the same.
	_, err = r.Seal(ctx, 1)
	require.EqualError(t, err, want0)

	_, err = r.Seal(ctx, 0)
	require.NoError(t, err)
	for _, name := range []string{"gen", "sum"} {
		_, err = r.RunStage(ctx, 1, name, one, true)
		require.NoError(t, err)
	}
	_, err = r.Seal(ctx, 1)
	require.NoError(t, err)

	// Past round 1 the message names the round's last stage, and spade
	// round as the other way to finish it.
	_, err = r.RunStage(ctx, 3, "gen", one, true)
	require.ErrorIs(t, err, pipeline.ErrNotCommitted)
	require.EqualError(t, err, "round 3 needs round 2 of run k8s sealed, and it is not sealed (no k8s/round=000002/_ROUND.json): once every stage of round 2 is committed, seal it with `spade commit --round 2 --stage sum --seal`, or run `spade round 2`, which runs what is left of it and seals it")
	_, err = r.RunRound(ctx, 3)
	require.ErrorContains(t, err, "round 3 needs round 2 of run k8s sealed, and it is not sealed")

	// Further ahead, rounds 2 and 3 are both unsealed: the message used to
	// suggest `spade round 3`, which fails the same way; it names round 2,
	// where the run goes on.
	const want4 = "round 4 needs round 3 of run k8s sealed, and it is not sealed (no k8s/round=000003/_ROUND.json); neither are the rounds before it from round 2 on (round 1 is the run's last sealed round): run them in order first, starting with `spade round 2` (or `spade round next`, once a round)"
	_, err = r.RunStage(ctx, 4, "gen", one, true)
	require.ErrorIs(t, err, pipeline.ErrNotCommitted)
	require.EqualError(t, err, want4)
	_, err = r.RunRound(ctx, 4)
	require.EqualError(t, err, want4)
}

func TestShardsGiveSameBytes(t *testing.T) {
	ctx := context.Background()
	st := memStore(t)
	ref := newRunner(t, st, "ref", &gen{parts: 8, rows: 100, failPart: -1})
	for n := 0; n <= 1; n++ {
		_, err := ref.RunRound(ctx, n)
		require.NoError(t, err)
	}
	for _, n := range []int{1, 3, 8} {
		run := fmt.Sprintf("sh%d", n)
		r := newRunner(t, st, run, &gen{parts: 8, rows: 100, failPart: -1})
		_, err := r.RunRound(ctx, 0)
		require.NoError(t, err)
		for i := 0; i < n; i++ {
			_, err := r.RunStage(ctx, 1, "gen", pipeline.Shard{Index: i, Count: n}, false)
			require.NoError(t, err)
			if i < n-1 {
				_, err := r.CommitStage(ctx, 1, "gen")
				if n > 1 {
					require.ErrorContains(t, err, "parts missing")
				}
			}
		}
		wrote, err := r.CommitStage(ctx, 1, "gen")
		require.NoError(t, err)
		require.True(t, wrote, "the first complete commit writes the manifests")
		// A second commit finds the stage committed and says so.
		wrote, err = r.CommitStage(ctx, 1, "gen")
		require.NoError(t, err)
		require.False(t, wrote, "an already committed stage is not committed again")
		_, err = r.RunRound(ctx, 1)
		require.NoError(t, err)
		require.Equal(t, digests(t, st, "ref", 1), digests(t, st, run, 1), "shards=%d", n)
	}
}

func TestIntegrityOnRead(t *testing.T) {
	ctx := context.Background()
	st := memStore(t)
	m := metricsRound1(t, st, &gen{parts: 1, rows: 3, failPart: -1})
	flipByte(t, st, m.Files[0].Key)
	_, err := pipeline.ReadManifestRows(ctx, st, schemas.Metrics, m)
	require.ErrorIs(t, err, pipeline.ErrIntegrity)
	require.ErrorContains(t, err, m.Files[0].Key)
}

func TestDecodeManifestErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		body string
		want string
	}{
		"not json":        {`{"format_version":`, "malformed JSON"},
		"no version":      {`{"table":"x"}`, "format_version missing"},
		"future version":  {`{"format_version": 99, "table":"x"}`, "unknown storage format version 99"},
		"unknown field":   {`{"format_version": 1, "table":"x", "files": [], "surprise": 1}`, "unknown field"},
		"bad file sha":    {`{"format_version": 1, "table":"x", "files": [{"key":"a/b","sha256":"zz","bytes":1,"rows":1}], "rows":1, "bytes":1}`, "files[0].sha256"},
		"totals mismatch": {`{"format_version": 1, "table":"x", "files": [], "rows": 5}`, "do not match"},
		"escaping key":    {`{"format_version": 1, "table":"x", "files": [{"key":"../etc/passwd","sha256":"` + strings.Repeat("a", 64) + `"}]}`, "files[0].key"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := pipeline.DecodeManifest("r/round=000001/x/_manifest.json", []byte(tc.body))
			require.ErrorContains(t, err, tc.want)
			require.ErrorContains(t, err, "r/round=000001/x/_manifest.json")
		})
	}
}

// TestReadManifestRowsOrder reads a table of many part files: the rows come
// back in file order whatever order the concurrent reads finish in; with
// damaged files the error names the lowest-numbered one even when it
// finishes last, and files after it are not read.
func TestReadManifestRowsOrder(t *testing.T) {
	ctx := context.Background()
	st := memStore(t)
	m := metricsRound1(t, st, &gen{parts: 9, rows: 90, failPart: -1})
	require.Greater(t, len(m.Files), pipeline.ReadFilesAtOnce, "the test needs more files than are read at once")
	var want []schemas.Metric
	for _, f := range m.Files {
		data, err := storage.ReadAll(ctx, st, f.Key)
		require.NoError(t, err)
		rows, _, err := table.Decode(schemas.Metrics, f.Key, data)
		require.NoError(t, err)
		want = append(want, rows...)
	}
	require.Len(t, want, 90)
	for range 5 {
		got, err := pipeline.ReadManifestRows(ctx, st, schemas.Metrics, m)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	// Files 1 and 2 are bad and read together; file 1 finishes last, yet
	// its error is the one returned.
	flipByte(t, st, m.Files[2].Key)
	flipByte(t, st, m.Files[1].Key)
	slow := &slowStore{Store: st, slow: map[string]bool{m.Files[1].Key: true}, delay: 100 * time.Millisecond}
	for range 3 {
		_, err := pipeline.ReadManifestRows(ctx, slow, schemas.Metrics, m)
		require.ErrorIs(t, err, pipeline.ErrIntegrity)
		require.ErrorContains(t, err, m.Files[1].Key)
	}
	// File 0 is bad and fails at once while every other read is slow: a
	// file after the first batch starts only once a slot is free, by then
	// file 0 has failed, so it is never read.
	flipByte(t, st, m.Files[0].Key)
	slow = &slowStore{Store: st, slow: map[string]bool{}, delay: 50 * time.Millisecond}
	for _, f := range m.Files[1:] {
		slow.slow[f.Key] = true
	}
	_, err := pipeline.ReadManifestRows(ctx, slow, schemas.Metrics, m)
	require.ErrorContains(t, err, m.Files[0].Key)
	require.LessOrEqual(t, slow.gets.Load(), int64(pipeline.ReadFilesAtOnce), "files after the first batch must not be read once file 0 failed")
}

// metricsRound1 commits rounds 0 and 1 of run "a" (gen and sum) in st and
// returns round 1's metrics manifest: a table of g.parts part files.
func metricsRound1(tb testing.TB, st storage.Store, g *gen) *pipeline.Manifest {
	tb.Helper()
	ctx := context.Background()
	r := &pipeline.Runner{Store: st, Run: "a", Config: config.Default(), Stages: []pipeline.Stage{sum{}, g}}
	for n := 0; n <= 1; n++ {
		_, err := r.RunRound(ctx, n)
		require.NoError(tb, err)
	}
	m, err := pipeline.ReadManifest(ctx, st, pipeline.ManifestKey("a", 1, "metrics"))
	require.NoError(tb, err)
	return m
}

// flipByte damages the stored object key by inverting its middle byte.
func flipByte(t *testing.T, st storage.Store, key string) {
	t.Helper()
	data, err := storage.ReadAll(context.Background(), st, key)
	require.NoError(t, err)
	data[len(data)/2] ^= 0xff
	require.NoError(t, storage.PutBytes(context.Background(), st, key, data))
}

// slowStore delays Get of some keys and counts every Get.
type slowStore struct {
	storage.Store
	slow  map[string]bool
	delay time.Duration
	gets  atomic.Int64
}

func (s *slowStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	s.gets.Add(1)
	if s.slow[key] {
		time.Sleep(s.delay)
	}
	return s.Store.Get(ctx, key)
}

// BenchmarkReadManifestRows reads a 16-file table from versitygw, the old
// way (one file after another) and with ReadManifestRows (readFilesAtOnce
// files at a time), side by side in one run.
func BenchmarkReadManifestRows(b *testing.B) {
	ctx := context.Background()
	srv := s3server.Start(b)
	st, err := storage.Open(ctx, srv.StoreURL("bench", nil))
	require.NoError(b, err)
	m := metricsRound1(b, st, &gen{parts: 16, rows: 16 * 2000, failPart: -1})
	require.Len(b, m.Files, 16)
	b.Run("one_file_at_a_time", func(b *testing.B) {
		for range b.N {
			var out []schemas.Metric
			for _, f := range m.Files {
				data, err := pipeline.ReadVerified(ctx, st, f)
				require.NoError(b, err)
				rows, _, err := table.Decode(schemas.Metrics, f.Key, data)
				require.NoError(b, err)
				out = append(out, rows...)
			}
			require.Len(b, out, 32000)
		}
	})
	b.Run("ReadManifestRows", func(b *testing.B) {
		for range b.N {
			out, err := pipeline.ReadManifestRows(ctx, st, schemas.Metrics, m)
			require.NoError(b, err)
			require.Len(b, out, 32000)
		}
	})
}

// partFiles returns the part files of round r's metrics, sorted by key.
func partFiles(t *testing.T, st storage.Store, run string, r int) []string {
	t.Helper()
	infos, err := st.List(context.Background(), pipeline.TableDir(run, r, "metrics")+"/part-")
	require.NoError(t, err)
	var out []string
	for _, in := range infos {
		out = append(out, in.Key)
	}
	return out
}

// TestResumeRewritesDamagedParts: parts an interrupted invocation (or a
// shard) wrote are checked before a resume trusts them. A part file
// damaged or deleted since, or a part record that no longer decodes, makes
// that part run again; it used to be committed as it was, into a manifest
// that every reader refused (integrity check failed) and no rerun could
// replace, so the round could never finish. spade commit refuses such a
// file instead of committing it.
func TestResumeRewritesDamagedParts(t *testing.T) {
	ctx := context.Background()
	st := memStore(t)

	clean := newRunner(t, st, "clean", &gen{parts: 4, rows: 20, failPart: -1})
	for n := 0; n <= 1; n++ {
		_, err := clean.RunRound(ctx, n)
		require.NoError(t, err)
	}

	t.Run("resume", func(t *testing.T) {
		g := &gen{parts: 4, rows: 20, failPart: -1}
		r := newRunner(t, st, "resume", g)
		_, err := r.RunRound(ctx, 0)
		require.NoError(t, err)
		for i := 0; i < 2; i++ {
			_, err = r.RunStage(ctx, 1, "gen", pipeline.Shard{Index: i, Count: 2}, false)
			require.NoError(t, err)
		}
		require.EqualValues(t, 4, g.runs.Load())
		files := partFiles(t, st, "resume", 1)
		require.Len(t, files, 4)
		flipByte(t, st, files[0])                    // part 0: bit rot
		require.NoError(t, st.Delete(ctx, files[2])) // part 2: deleted
		fp := r.FingerprintOf(ctx, g, 1)             // part 3: record no longer decodes
		require.NoError(t, storage.PutBytes(ctx, st, pipeline.PendingKey("resume", 1, "gen", fp, 3), []byte(`{"format_version":1,`)))

		_, err = r.RunRound(ctx, 1)
		require.NoError(t, err)
		require.EqualValues(t, 7, g.runs.Load(), "parts 0, 2 and 3 ran again, part 1 was kept")
		require.Equal(t, digests(t, st, "clean", 1), digests(t, st, "resume", 1))
		m, err := pipeline.ReadManifest(ctx, st, pipeline.ManifestKey("resume", 1, "metrics"))
		require.NoError(t, err)
		for _, f := range m.Files {
			_, err := pipeline.ReadVerified(ctx, st, f)
			require.NoError(t, err, "every committed file is whole")
		}
	})

	t.Run("spade commit", func(t *testing.T) {
		g := &gen{parts: 4, rows: 20, failPart: -1}
		r := newRunner(t, st, "sharded", g)
		_, err := r.RunRound(ctx, 0)
		require.NoError(t, err)
		for i := 0; i < 2; i++ {
			_, err = r.RunStage(ctx, 1, "gen", pipeline.Shard{Index: i, Count: 2}, false)
			require.NoError(t, err)
		}
		files := partFiles(t, st, "sharded", 1)
		flipByte(t, st, files[1])
		_, err = r.CommitStage(ctx, 1, "gen")
		require.ErrorIs(t, err, pipeline.ErrIntegrity)
		require.ErrorContains(t, err, files[1])
		require.ErrorContains(t, err, "part 1")
		_, err = pipeline.ReadManifest(ctx, st, pipeline.ManifestKey("sharded", 1, "metrics"))
		require.ErrorIs(t, err, storage.ErrNotFound, "nothing committed")

		require.NoError(t, st.Delete(ctx, files[3]))
		_, err = r.CommitStage(ctx, 1, "gen")
		require.ErrorIs(t, err, pipeline.ErrIntegrity)

		// Running the shard again rewrites its damaged and missing files.
		_, err = r.RunStage(ctx, 1, "gen", pipeline.Shard{Index: 1, Count: 2}, false)
		require.NoError(t, err)
		require.EqualValues(t, 6, g.runs.Load())
		_, err = r.CommitStage(ctx, 1, "gen")
		require.NoError(t, err)
		_, err = r.RunRound(ctx, 1)
		require.NoError(t, err)
		require.Equal(t, digests(t, st, "clean", 1), digests(t, st, "sharded", 1))
	})
}

// gated is gen whose parts wait for gate to close.
type gated struct {
	*gen
	gate    chan struct{}
	entered chan struct{}
}

func (g gated) Run(ctx context.Context, env *pipeline.Env, part int, out *pipeline.Out) error {
	g.entered <- struct{}{}
	<-g.gate
	return g.gen.Run(ctx, env, part, out)
}

// TestConcurrentRoundsOfOneRun: two `spade round 1` of one run at once
// (`round N` takes no lease). The one that finishes first commits, seals
// and removes the part records; the other, which had skipped the parts
// the first had written, used to fail with "parts missing; run the
// missing shards, then spade commit" although the round was committed.
func TestConcurrentRoundsOfOneRun(t *testing.T) {
	ctx := context.Background()
	st := memStore(t)
	first := newRunner(t, st, "a", &gen{parts: 2, rows: 10, failPart: -1})
	_, err := first.RunRound(ctx, 0)
	require.NoError(t, err)
	_, err = first.RunStage(ctx, 1, "gen", pipeline.Shard{Index: 0, Count: 2}, false) // part 0 written
	require.NoError(t, err)

	g := gated{gen: &gen{parts: 2, rows: 10, failPart: -1}, gate: make(chan struct{}), entered: make(chan struct{}, 2)}
	second := newRunner(t, st, "a", nil)
	second.Stages = []pipeline.Stage{sum{}, g}
	done := make(chan error, 1)
	go func() {
		_, err := second.RunRound(ctx, 1)
		done <- err
	}()
	<-g.entered // the second invocation skipped part 0 and runs part 1

	res, err := first.RunRound(ctx, 1)
	require.NoError(t, err)
	require.NotNil(t, res.Seal)
	close(g.gate)
	require.NoError(t, <-done, "the round is committed: the second invocation succeeds too")
	res2, err := second.RunRound(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, res.Seal.Digest(), res2.Seal.Digest())
}

// TestFenceStopsCommits: a Fence that fails (the lease was lost) stops
// every commit write: no manifest and no seal, and its error is returned.
func TestFenceStopsCommits(t *testing.T) {
	ctx := context.Background()
	st := memStore(t)
	r := newRunner(t, st, "a", &gen{parts: 2, rows: 10, failPart: -1})
	_, err := r.RunRound(ctx, 0)
	require.NoError(t, err)
	lost := errors.New("lease lost (test)")
	r.Fence = func(context.Context) error { return lost }
	_, err = r.RunRound(ctx, 1)
	require.ErrorIs(t, err, lost)
	infos, err := st.List(ctx, "a/round=000001/")
	require.NoError(t, err)
	for _, in := range infos {
		require.NotContains(t, in.Key, "_manifest.json")
		require.NotContains(t, in.Key, "_ROUND.json")
	}
	calls := 0 // the manifests pass, the seal is refused
	r.Fence = func(context.Context) error {
		calls++
		if calls > 2 {
			return lost
		}
		return nil
	}
	_, err = r.RunRound(ctx, 1)
	require.ErrorIs(t, err, lost)
	_, err = pipeline.ReadSeal(ctx, st, "a", 1)
	require.ErrorIs(t, err, pipeline.ErrNotCommitted, "no seal past a failed fence")
	r.Fence = nil
	_, err = r.RunRound(ctx, 1)
	require.NoError(t, err)
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sourcegraph/conc/pool"
	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/internal/testutil/s3server"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/storage"
)

// copyTree copies the directory src to dst (regular files only).
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	}))
}

// TestVerifyFindsDamage: spade verify reads every committed file of a
// store and finds each of five kinds of damage (a flipped byte, a
// truncated file, a deleted file, an edited manifest, a manifest whose
// files were swapped with its totals fixed), exit 1 naming the object;
// a clean store exits 0. spade sql refuses the swapped store (its
// manifest no longer matches the seal), and diff --verify calls each
// damaged store trouble (exit 2).
func TestVerifyFindsDamage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a round in a subprocess")
	}
	o := newOpsEnv(t)
	o.must(t, nil, "round", "1")
	runs := filepath.Join(o.dir, "runs")
	clean := o.spade(t, nil, "verify")
	require.Equal(t, 0, clean.code, "%s%s", clean.stdout, clean.stderr)
	require.Contains(t, clean.stdout, ": ok")

	mpath := filepath.Join(runs, "default", "round=000001", "rollouts", "_manifest.json")
	var m pipeline.Manifest
	data, err := os.ReadFile(mpath)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(data, &m))
	require.GreaterOrEqual(t, len(m.Files), 2)
	file := func(dir string, i int) string { return filepath.Join(dir, filepath.FromSlash(m.Files[i].Key)) }
	editManifest := func(t *testing.T, dir string, edit func(*pipeline.Manifest)) {
		p := filepath.Join(dir, "default", "round=000001", "rollouts", "_manifest.json")
		mm := m
		mm.Files = append([]pipeline.FileEntry(nil), m.Files...)
		edit(&mm)
		mm.Rows, mm.Bytes = 0, 0
		for _, f := range mm.Files {
			mm.Rows += f.Rows
			mm.Bytes += f.Bytes
		}
		require.NoError(t, os.WriteFile(p, mm.Encode(), 0o644))
	}
	manifestKey := pipeline.ManifestKey("default", 1, "rollouts")
	cases := []struct {
		name   string
		damage func(t *testing.T, dir string)
		names  string // what verify's output must name
	}{
		{"flipped byte", func(t *testing.T, dir string) {
			b, err := os.ReadFile(file(dir, 0))
			require.NoError(t, err)
			b[len(b)/2] ^= 0x01
			require.NoError(t, os.WriteFile(file(dir, 0), b, 0o644))
		}, m.Files[0].Key + ": integrity check failed: sha256"},
		{"truncated file", func(t *testing.T, dir string) {
			require.NoError(t, os.Truncate(file(dir, 0), m.Files[0].Bytes/2))
		}, m.Files[0].Key + ": integrity check failed: " + strconv.FormatInt(m.Files[0].Bytes/2, 10) + " bytes"},
		{"deleted file", func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(file(dir, 1)))
		}, m.Files[1].Key + ": integrity check failed: file missing"},
		{"edited manifest", func(t *testing.T, dir string) {
			editManifest(t, dir, func(mm *pipeline.Manifest) { mm.Files[0].Rows++ })
		}, manifestKey + ": integrity check failed: content digest"},
		{"manifest swapped against its seal", func(t *testing.T, dir string) {
			editManifest(t, dir, func(mm *pipeline.Manifest) {
				mm.Files[1] = mm.Files[0]
				mm.Files[1].Part = 1
			})
		}, manifestKey + ": integrity check failed: content digest"},
	}
	t.Run("leftover part record", func(t *testing.T) {
		// A kill during the seal's clean-up: harmless, named by verify,
		// removed by gc.
		dir := filepath.Join(t.TempDir(), "runs")
		copyTree(t, runs, dir)
		left := "default/round=000001/_pending/rollout-0123456789abcdef/part-00000.json"
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, left)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, left), []byte(`{"files":{}}`), 0o644))
		store := "file://" + dir
		r := spade(t, o.dir, nil, o.args(store, []string{"verify"})...)
		require.Equal(t, 0, r.code, "%s%s", r.stdout, r.stderr)
		require.Contains(t, r.stdout, "leftover part record "+left)
		r = spade(t, o.dir, nil, o.args(store, []string{"gc", "--grace", "0s"})...)
		require.Equal(t, 0, r.code, "%s%s", r.stdout, r.stderr)
		require.Contains(t, r.stdout, left)
		r = spade(t, o.dir, nil, o.args(store, []string{"verify"})...)
		require.Equal(t, 0, r.code, "%s%s", r.stdout, r.stderr)
		require.NotContains(t, r.stdout, "leftover")
	})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "runs")
			copyTree(t, runs, dir)
			c.damage(t, dir)
			store := "file://" + dir
			r := spade(t, o.dir, nil, o.args(store, []string{"verify"})...)
			require.Equal(t, exitFailure, r.code, "%s%s", r.stdout, r.stderr)
			require.Contains(t, r.stdout, "DAMAGED ")
			require.Contains(t, r.stdout, c.names)
			require.Contains(t, r.stdout, "no command repairs it: round 1 is sealed")
			r = spade(t, o.dir, nil, o.args(store, []string{"verify", "--json"})...)
			require.Equal(t, exitFailure, r.code)
			var out verifyJSON
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &out))
			require.False(t, out.OK)
			require.NotEmpty(t, out.Runs[0].Damage)
			r = spade(t, o.dir, nil, o.args(store, []string{"diff", "default", "default", "--verify"})...)
			require.Equal(t, exitUsage, r.code, "diff --verify of a damaged store is trouble: %s%s", r.stdout, r.stderr)
			require.Contains(t, r.stderr, "is damaged")
			if strings.HasPrefix(c.name, "manifest swapped") {
				r = spade(t, o.dir, nil, o.args(store, []string{"sql", "select count(*), count(distinct env_id) from rollouts"})...)
				require.Equal(t, exitFailure, r.code, "sql must refuse a manifest that disagrees with its seal: %s%s", r.stdout, r.stderr)
				require.Contains(t, r.stderr, manifestKey+": integrity check failed")
				require.Empty(t, r.stdout)
			}
		})
	}
}

// TestCorpusImportFIFO: a named pipe as the input of corpus import is
// refused at once (exit 2, naming it), with no writer and with one,
// and nothing is written.
func TestCorpusImportFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "corpus.jsonl")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	for _, writer := range []bool{false, true} {
		if writer {
			go func() {
				// A writer that would feed the pipe if the import opened it.
				f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
				if err == nil {
					_, _ = f.WriteString(`{"text":"a document"}` + "\n")
					_ = f.Close()
				}
			}()
		}
		start := time.Now()
		r := spade(t, dir, nil, "--store", "file://"+filepath.Join(dir, "runs"), "--run", "x", "corpus", "import", fifo)
		require.Equal(t, exitUsage, r.code, "%s%s", r.stdout, r.stderr)
		require.Contains(t, r.stderr, fifo+" is a named pipe (FIFO), not a regular file")
		require.Less(t, time.Since(start), 30*time.Second)
		_, err := os.Stat(filepath.Join(dir, "runs"))
		require.ErrorIs(t, err, os.ErrNotExist, "nothing written")
	}
	// Unblock the writer goroutine, if it is still waiting for a reader.
	if f, err := os.OpenFile(fifo, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
		_ = f.Close()
	}
}

// raceConfig is the 240-slot config of TestGCRace.
const raceConfig = `seed: 11
workers: 2
sample:
  slots: 240
rollout:
  group_size: 2
sandbox:
  call_timeout_s: 60
`

// envInt reads a positive integer from the environment, def when unset.
func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, name)
	require.Positive(t, n, name)
	return n
}

// TestGCRace: `spade gc --grace 0s` runs in a loop (alternating --run r
// and --all-runs) beside `spade round 1` of a 240-slot config, in a store
// that holds 1,000 other runs (so a gc pass reads 1,000 manifests), with
// the round killed by SIGKILL at random moments and resumed. Every gc
// either deletes (exit 0) or refuses the run being written (exit 4,
// naming the writer), never anything else; the round ends sealed,
// `spade verify` passes, its round ids equal an uninterrupted run's, and
// no object of the other runs is touched. On the file store and on S3
// (versitygw).
//
// GC_RACE_KILLS sets the number of kills per store (default 2); the
// heavy version, e.g. GC_RACE_KILLS=20, is for a quiet machine.
func TestGCRace(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rounds in subprocesses")
	}
	kills := envInt(t, "GC_RACE_KILLS", 2)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "race.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(raceConfig), 0o644))
	ref := "file://" + filepath.Join(dir, "ref")
	start := time.Now()
	r := spade(t, dir, nil, "--store", ref, "--config", cfg, "--log-level", "warn", "round", "1")
	require.Equal(t, 0, r.code, r.stderr)
	full := time.Since(start)
	refStore := openStore(t, ref)
	want := sealDigests(t, refStore, "default", 1)
	for _, kind := range []string{"file", "s3"} {
		t.Run(kind, func(t *testing.T) {
			store := "file://" + filepath.Join(t.TempDir(), "runs")
			if kind == "s3" {
				srv := s3server.Start(t)
				store = srv.StoreURL("spade/race", nil)
			}
			gcRace(t, dir, cfg, store, refStore, full, kills, want)
		})
	}
}

// otherRuns writes n runs o0000..o(n-1) into st, each a copy of the
// reference run's round 0 (run file, corpus manifest, seal) whose
// manifests list one shared copy of the corpus file, and returns every
// key written with its bytes.
func otherRuns(t *testing.T, st, ref storage.Store, n int) map[string][]byte {
	t.Helper()
	ctx := context.Background()
	read := func(key string) []byte {
		b, err := storage.ReadAll(ctx, ref, key)
		require.NoError(t, err)
		return b
	}
	m, err := pipeline.ReadManifest(ctx, ref, pipeline.ManifestKey("default", 0, "corpus"))
	require.NoError(t, err)
	out := map[string][]byte{}
	shared := map[string]string{}
	for _, f := range m.Files {
		key := strings.Replace(f.Key, "default/", "o0000/", 1)
		shared[f.Key] = key
		out[key] = read(f.Key)
	}
	runFile, seal := read(pipeline.RunFileKey("default")), read(pipeline.SealKey("default", 0))
	for i := range n {
		run := fmt.Sprintf("o%04d", i)
		mm := *m
		mm.Run = run
		mm.Files = nil
		for _, f := range m.Files {
			f.Key = shared[f.Key]
			mm.Files = append(mm.Files, f)
		}
		out[pipeline.ManifestKey(run, 0, "corpus")] = mm.Encode()
		out[pipeline.RunFileKey(run)] = bytes.Replace(runFile, []byte(`"run": "default"`), []byte(`"run": "`+run+`"`), 1)
		out[pipeline.SealKey(run, 0)] = bytes.ReplaceAll(seal, []byte("default/"), []byte(run+"/"))
	}
	p := pool.New().WithErrors().WithMaxGoroutines(16)
	for k, b := range out {
		p.Go(func() error { return storage.PutBytes(ctx, st, k, b) })
	}
	require.NoError(t, p.Wait())
	return out
}

// gcRace is TestGCRace on one store.
func gcRace(t *testing.T, dir, cfg, store string, ref storage.Store, full time.Duration, kills int, want map[string]string) {
	st := openStore(t, store)
	others := otherRuns(t, st, ref, 1000)
	base := []string{"--store", store, "--config", cfg, "--log-level", "warn"}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var passes, busy, deleted int
	var bad []string
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			args := append(append([]string{}, base...), "--run", "r", "gc", "--grace", "0s", "--json")
			if i%2 == 1 {
				args = append(args, "--all-runs")
			}
			cmd := exec.Command(spadeBin, args...)
			cmd.Dir = dir
			var so, se bytes.Buffer
			cmd.Stdout, cmd.Stderr = &so, &se
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				code = -1
			}
			mu.Lock()
			passes++
			switch {
			case code == exitBusy && strings.Contains(se.String(), "is being written by pid"):
				busy++
			case code == exitFailure && strings.Contains(se.String(), "run r does not exist"):
				// Before the first round wrote anything.
			case code == 0:
				var res struct {
					Deleted int `json:"deleted"`
				}
				if json.Unmarshal(so.Bytes(), &res) != nil {
					bad = append(bad, "gc --json printed no result: "+so.String())
				}
				deleted += res.Deleted
			default:
				bad = append(bad, fmt.Sprintf("gc %v exited %d: %s", args[len(base):], code, se.String()))
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	})

	rng := rand.New(rand.NewPCG(27, uint64(len(store))))
	killed := 0
	for range kills {
		cmd := exec.Command(spadeBin, append(append([]string{}, base...), "--run", "r", "round", "1")...)
		cmd.Dir = dir
		var se bytes.Buffer
		cmd.Stderr = &se
		require.NoError(t, cmd.Start())
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			require.NoError(t, err, "round 1 finished before its kill: %s", se.String())
		case <-time.After(time.Duration((0.2 + 0.7*rng.Float64()) * float64(full))):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-done
			killed++
		}
		// Let gc passes run on what the kill left (a dead writer's
		// registration, part files without a record) before the resume.
		mu.Lock()
		target := passes + 2
		mu.Unlock()
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			mu.Lock()
			n := passes
			mu.Unlock()
			if n >= target {
				break
			}
		}
	}
	r := spade(t, dir, nil, append(append([]string{}, base...), "--run", "r", "round", "1")...)
	require.Equal(t, 0, r.code, "the resumed round: %s", r.stderr)
	close(stop)
	wg.Wait()
	mu.Lock()
	require.Empty(t, bad, "gc must delete or refuse, nothing else")
	t.Logf("%s: %d kills; %d gc passes beside the round: %d refused the run being written, %d objects deleted", store, killed, passes, busy, deleted)
	require.Positive(t, busy, "some gc pass met the round running")
	mu.Unlock()

	// Whatever gc deletes now is garbage: the sealed round stays whole.
	r = spade(t, dir, nil, append(append([]string{}, base...), "--run", "r", "gc", "--grace", "0s")...)
	require.Equal(t, 0, r.code, r.stderr)
	for _, cmd := range [][]string{{"verify"}, {"round", "1"}} {
		r = spade(t, dir, nil, append(append(append([]string{}, base...), "--run", "r"), cmd...)...)
		require.Equal(t, 0, r.code, "spade %v after the race: %s%s", cmd, r.stdout, r.stderr)
	}
	require.Contains(t, r.stdout, "already committed")
	require.Equal(t, want, sealDigests(t, st, "r", 1), "the raced round is byte-identical to an uninterrupted one")
	ctx := context.Background()
	for k, b := range others {
		got, err := storage.ReadAll(ctx, st, k)
		require.NoError(t, err, "gc removed %s of another run", k)
		require.Equal(t, b, got, k)
	}
	leases, err := st.List(ctx, "r/_LEASE")
	require.NoError(t, err)
	require.Empty(t, leases, "no lease or registration is left behind")
}

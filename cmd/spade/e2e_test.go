package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/internal/testutil/shareddata"
)

func smallConfig(t testing.TB) string {
	p, err := filepath.Abs("testdata/small.yaml")
	require.NoError(t, err)
	return p
}

// parquetFiles maps each .parquet file under dir/runs to its sha256.
func parquetFiles(t testing.TB, dir string) map[string]string {
	out := map[string]string{}
	root := filepath.Join(dir, "runs")
	if _, err := os.Stat(root); os.IsNotExist(err) {
		return out // nothing was ever written: the store creates its root at the first write
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".parquet") {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		rel, _ := filepath.Rel(root, p)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestRoundDeterministicIdempotent: two runs of round 1 with the same
// config and seed give byte-identical Parquet files; a second `spade round
// 1` does nothing; status shows the tables.
func TestRoundDeterministicIdempotent(t *testing.T) {
	cfg := smallConfig(t)
	a, b := t.TempDir(), t.TempDir()
	for _, dir := range []string{a, b} {
		r := spade(t, dir, nil, "--config", cfg, "round", "1")
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stdout, "round 1 of run default committed")
	}
	fa, fb := parquetFiles(t, a), parquetFiles(t, b)
	require.NotEmpty(t, fa)
	require.Equal(t, fa, fb, "same config and seed must give byte-identical Parquet files")

	again := spade(t, a, nil, "--config", cfg, "round", "1")
	require.Equal(t, 0, again.code, again.stderr)
	require.Contains(t, again.stdout, "already committed")
	require.Equal(t, fa, parquetFiles(t, a))

	st := spade(t, a, nil, "--config", cfg, "status", "--json")
	require.Equal(t, 0, st.code, st.stderr)
	var status struct {
		NextRound int `json:"next_round"`
		Rounds    []struct {
			Round  int  `json:"round"`
			Sealed bool `json:"sealed"`
			Tables []struct {
				Table string `json:"table"`
				Rows  int64  `json:"rows"`
			} `json:"tables"`
		} `json:"rounds"`
	}
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &status))
	require.Equal(t, 2, status.NextRound)
	require.Len(t, status.Rounds, 2)
	rows := map[string]int64{}
	for _, tb := range status.Rounds[1].Tables {
		rows[tb.Table] = tb.Rows
	}
	require.EqualValues(t, 6, rows["slots"])
	require.EqualValues(t, rows["environments"]*0+rows["rollouts"], rows["rollouts"])
	valid := spade(t, a, nil, "--config", cfg, "sql", "--format", "csv", "select count(*) filter (where valid) * 8 = (select count(*) from rollouts) from environments")
	require.Equal(t, 0, valid.code, valid.stderr)
	require.Contains(t, valid.stdout, "true", "every valid environment is played 4 + 4 times")
}

// TestKillResume kills `spade round 1` with SIGKILL at several moments and
// reruns it: the files end identical to an uninterrupted run's, and after
// every kill the committed tables are whole (status and sql succeed).
func TestKillResume(t *testing.T) {
	cfg := smallConfig(t)
	ref := t.TempDir()
	start := time.Now()
	r := spade(t, ref, nil, "--config", cfg, "round", "1")
	require.Equal(t, 0, r.code, r.stderr)
	full := time.Since(start)
	want := parquetFiles(t, ref)

	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(42, 1))
	kills := 0
	for i := 0; i < 6; i++ {
		cmd := exec.Command(spadeBin, "--config", cfg, "round", "1")
		cmd.Dir = dir
		require.NoError(t, cmd.Start())
		delay := time.Duration(rng.Float64() * float64(full))
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(delay):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-done
			kills++
		}
		// Readers see only whole committed tables.
		if _, err := os.Stat(filepath.Join(dir, "runs", "default", "_RUN.json")); err == nil {
			st := spade(t, dir, nil, "--config", cfg, "status")
			require.Equal(t, 0, st.code, "status after kill %d: %s", i, st.stderr)
		}
	}
	t.Logf("killed %d times (uninterrupted round: %v)", kills, full)
	r = spade(t, dir, nil, "--config", cfg, "round", "1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, want, parquetFiles(t, dir), "a killed and resumed round must end with the same files")
}

// TestBadInput: clear errors, documented exit codes, nothing committed.
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("sample:\n  slots: many\n"), 0o644))
	unknown := filepath.Join(dir, "unknown.yaml")
	require.NoError(t, os.WriteFile(unknown, []byte("sample:\n  slotz: 3\n"), 0o644))
	zero := filepath.Join(dir, "zero.yaml")
	require.NoError(t, os.WriteFile(zero, []byte("sample:\n  slots: 0\n"), 0o644))
	skills := filepath.Join(dir, "skills.yaml")
	require.NoError(t, os.WriteFile(skills, []byte("sample:\n  skills: [planning, juggling]\n  active_skills: 2\n"), 0o644))
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"bad yaml type", nil, []string{"--config", bad, "round", "1"}, 2, "line 2"},
		{"unknown key", nil, []string{"--config", unknown, "round", "1"}, 2, "slotz"},
		{"zero count", nil, []string{"--config", zero, "round", "1"}, 2, "sample.slots must be > 0"},
		// The procedural model designs for six skills only; another name used
		// to fail every design of its slots and commit an empty pool.
		{"skill the procedural model lacks", nil, []string{"--config", skills, "round", "1"}, 2, `sample.skills[1] "juggling" is not a skill the procedural model designs for`},
		{"same, one stage", nil, []string{"--config", skills, "stage", "sample", "--round", "1"}, 2, `"juggling"`},
		{"same, a fork", nil, []string{"--config", skills, "fork", "default", "--round", "0", "juggler"}, 2, `"juggling"`},
		{"unknown scheme", nil, []string{"--store", "fiel://./runs", "round", "1"}, 2, `unknown store URL scheme "fiel"`},
		{"unknown stage", nil, []string{"stage", "designn", "--round", "1"}, 2, `unknown stage "designn"`},
		{"bad round", nil, []string{"round", "zero"}, 2, "want a number"},
		{"bad shard", nil, []string{"stage", "design", "--round", "1", "--shard", "3/2"}, 2, "invalid shard"},
		{"future round", nil, []string{"round", "5"}, 1, "round 5 needs round 4"},
		{"stage at the corpus round", nil, []string{"stage", "rollout", "--round", "0"}, 2, "round 0 holds the corpus only"},
		{"design off its rounds", nil, []string{"stage", "design", "--round", "2"}, 2, "regeneration rounds are 1, 1+k, 1+2k, ... with k = 4"},
		{"corpus after round 0", nil, []string{"stage", "corpus", "--round", "1"}, 2, "stage corpus does not run at round 1 (it runs at round 0 only)"},
		{"bad env var", []string{"SPADE_ROLLOUT_GROUP_SIZE=eight"}, []string{"round", "1"}, 2, "SPADE_ROLLOUT_GROUP_SIZE"},
		{"bad run name", nil, []string{"--run", "../x", "round", "1"}, 2, "invalid run name"},
		// Argument counts and unknown commands are usage errors too.
		{"round without N", nil, []string{"round"}, 2, "accepts 1 arg(s), received 0"},
		{"round with two", nil, []string{"round", "1", "2"}, 2, "accepts 1 arg(s), received 2"},
		{"sql without query", nil, []string{"sql"}, 2, "arg"},
		{"import without file", nil, []string{"corpus", "import"}, 2, "requires at least 1 arg(s)"},
		{"unknown command", nil, []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"unknown subcommand", nil, []string{"corpus", "frobnicate"}, 2, `unknown command "frobnicate"`},
		{"query that opens with a comment", nil, []string{"sql", "-- learnable per round\nselect 1"}, 2, `put -- before it: spade sql -- "ARG"`},
		{"NaN setting", []string{"SPADE_ROLLOUT_TEMPERATURE=NaN"}, []string{"config", "show"}, 2, "rollout.temperature must be a finite number (got NaN)"},
		// commit used to panic for a stage that does not run at the round.
		{"commit off its rounds", nil, []string{"commit", "--round", "2", "--stage", "design"}, 2, "stage design does not run at round 2"},
		{"commit corpus after round 0", nil, []string{"commit", "--round", "2", "--stage", "sample"}, 2, "stage sample does not run at round 2"},
		// commit used to say "got 1" about the round it was given.
		{"commit without stage", nil, []string{"commit", "--round", "1"}, 2, "--stage NAME is required"},
		{"commit without round", nil, []string{"commit", "--stage", "design"}, 2, "--round N is required"},
		{"commit negative round", nil, []string{"commit", "--round", "-2", "--stage", "design"}, 2, "--round -2: want N >= 0"},
		// --lease-ttl was accepted and ignored without next.
		{"lease-ttl without next", nil, []string{"round", "1", "--lease-ttl", "60"}, 2, "--lease-ttl applies to 'spade round next' only"},
		{"negative stage round", nil, []string{"stage", "design", "--round", "-3"}, 2, "spade: --round -3: want N >= 0\n"},
		// stage without --round used to say "(got -1)", a value nobody gave.
		{"stage without round", nil, []string{"stage", "design"}, 2, "spade: --round N is required (the round the stage runs at, N >= 0)\n"},
		// The message used to name only the characters, which "1abc" has.
		{"dag id starting with a digit", nil, []string{"dag", "airflow", "--dag-id", "1abc"}, 2, "not starting with a digit"},
		// One message used to name all three flags, whichever was wrong.
		{"dag shards 0", nil, []string{"dag", "airflow", "--shards", "0"}, 2, "spade: --shards 0: want >= 1\n"},
		{"dag retries -1", nil, []string{"dag", "airflow", "--retries", "-1"}, 2, "spade: --retries -1: want >= 0\n"},
		{"dag retry delay -1", nil, []string{"dag", "airflow", "--retry-delay", "-1"}, 2, "spade: --retry-delay -1: want >= 0 (seconds)\n"},
		// A replay run that is not a run name, or does not exist, used to
		// pass and fail the design stage once corpus and sample had
		// committed.
		{"replay not a run name", []string{"SPADE_MODEL_REPLAY=../base"}, []string{"round", "1"}, 2, "model.replay: invalid run name"},
		{"replay of no run", []string{"SPADE_MODEL_REPLAY=nosuchrun"}, []string{"round", "1"}, 2, "model.replay: run nosuchrun does not exist"},
		{"replay of no run, one stage", []string{"SPADE_MODEL_REPLAY=nosuchrun"}, []string{"stage", "design", "--round", "1"}, 2, "model.replay: run nosuchrun does not exist"},
		// gc of a run that does not exist used to print an empty summary
		// and exit 0; it fails as status does. Every run of an empty
		// store is fine.
		{"gc of no run", nil, []string{"--run", "nosuch", "gc"}, 1, "run nosuch does not exist in file://./runs (no key under nosuch/)"},
		{"status of no run", nil, []string{"--run", "nosuch", "status"}, 1, "run nosuch does not exist (no nosuch/_RUN.json)"},
		{"gc of every run of an empty store", nil, []string{"gc", "--all-runs"}, 0, "0 manifests read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := spade(t, dir, tc.env, tc.args...)
			require.Equal(t, tc.code, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
			out := r.stderr
			if tc.code == 0 {
				out = r.stdout
			}
			require.Contains(t, out, tc.want)
		})
	}
	require.Empty(t, parquetFiles(t, dir), "bad input must commit nothing")
	// A stage asked for at a round it does not run at is refused before the
	// run is created: its config stays free to choose.
	r := spade(t, dir, nil, "--run", "untouched", "stage", "design", "--round", "0")
	require.Equal(t, 2, r.code, r.stderr)
	// So is a round whose previous round is missing.
	r = spade(t, dir, nil, "--run", "untouched", "round", "3")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "round 3 needs round 2")
	_, err := os.Stat(filepath.Join(dir, "runs", "untouched"))
	require.True(t, os.IsNotExist(err), "the run must not be created: %v", err)
}

// TestEnvCheckHelpDefault: --seeds names its real default once; pflag
// used to append "(default [])" for the empty slice behind it.
func TestEnvCheckHelpDefault(t *testing.T) {
	r := spade(t, t.TempDir(), nil, "env", "check", "--help")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "(default 0,1,2; at least 3 are used)")
	require.NotContains(t, r.stdout, "(default [])")
}

// TestCorpusImportUnarXive imports the real unarXive sample and queries it.
func TestCorpusImportUnarXive(t *testing.T) {
	src := shareddata.Path(t, "datasets/unarxive-sample/arXiv_src_2212_086.jsonl.gz")
	dir := t.TempDir()
	args := []string{"--run", "arxiv", "corpus", "import", src, "--id", "paper_id", "--title", "metadata.title",
		"--text", "abstract.text", "--text", "body_text[].text", "--license", "metadata.license", "--domain", "discipline"}
	r := spade(t, dir, nil, args...)
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "imported 49 documents")
	q := spade(t, dir, nil, "--run", "arxiv", "sql", "--format", "csv", "select count(*), count(distinct title), min(length(text)) > 1000, sum(length(text)) > 3000000 from corpus")
	require.Equal(t, 0, q.code, q.stderr)
	require.Contains(t, q.stdout, "49,49,true,true")
	again := spade(t, dir, nil, args...)
	require.Equal(t, 0, again.code, again.stderr)
	require.Contains(t, again.stdout, "already imported")
	other := spade(t, dir, nil, "--run", "arxiv", "corpus", "import", src, "--title", "metadata.title", "--text", "abstract.text")
	require.Equal(t, 3, other.code, "a different corpus for the same run is a conflict: %s", other.stderr)
	miss := spade(t, dir, nil, "--run", "arxiv2", "corpus", "import", src, "--text", "body_text[].txt")
	require.NotEqual(t, 0, miss.code)
	require.Contains(t, miss.stderr, "body_text[].txt")
}

// contentDigests maps "round/table" to its content digest, as `spade status
// --json` reports it.
func contentDigests(t testing.TB, dir string, env []string, run string) map[string]string {
	t.Helper()
	st := spade(t, dir, env, "--run", run, "status", "--json")
	require.Equal(t, 0, st.code, st.stderr)
	var status struct {
		Rounds []struct {
			Round  int `json:"round"`
			Tables []struct {
				Table         string `json:"table"`
				ContentDigest string `json:"content_digest"`
			} `json:"tables"`
		} `json:"rounds"`
	}
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &status))
	out := map[string]string{}
	for _, r := range status.Rounds {
		for _, tb := range r.Tables {
			out[fmt.Sprintf("%d/%s", r.Round, tb.Table)] = tb.ContentDigest
		}
	}
	return out
}

// TestRecordReplay records a round, replays it from the recorded model
// calls in another run, and compares every table: byte-identical. A replay
// of a call that was never recorded fails the stage.
func TestRecordReplay(t *testing.T) {
	cfg := smallConfig(t)
	dir := t.TempDir()
	r := spade(t, dir, nil, "--config", cfg, "--run", "rec", "round", "1")
	require.Equal(t, 0, r.code, r.stderr)
	r = spade(t, dir, []string{"SPADE_MODEL_REPLAY=rec"}, "--config", cfg, "--run", "rep", "round", "1")
	require.Equal(t, 0, r.code, r.stderr)
	rec := contentDigests(t, dir, nil, "rec")
	rep := contentDigests(t, dir, []string{"SPADE_MODEL_REPLAY=rec"}, "rep")
	require.NotEmpty(t, rec)
	require.Equal(t, rec, rep, "a replayed round must reproduce every table")

	// A different seed asks questions the recording cannot answer.
	miss := spade(t, dir, []string{"SPADE_MODEL_REPLAY=rec", "SPADE_SEED=99"}, "--config", cfg, "--run", "miss", "round", "1")
	require.Equal(t, 1, miss.code, miss.stderr)
	require.Contains(t, miss.stderr, "no recorded call")
}

// TestEnvCheckCLI: `spade env check` exits 0 on the two documented
// examples and 1, naming the failed check, on every hostile or broken
// program of the sandbox suite (its first line says which check rejects it).
func TestEnvCheckCLI(t *testing.T) {
	for _, ex := range []string{"../../docs/examples/guess_game.py", "../../docs/examples/bank_tooluse.py"} {
		r := spade(t, ".", nil, "env", "check", ex)
		require.Equal(t, 0, r.code, "%s: %s%s", ex, r.stdout, r.stderr)
	}
	files, err := filepath.Glob("../../engines/envcheck/testdata/hostile/*.py")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(files), 15)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			first, _, _ := strings.Cut(string(src), "\n")
			fields := strings.Fields(strings.TrimPrefix(first, "# expect:"))
			require.NotEmpty(t, fields, "%s: first line must be '# expect: CHECK ...'", f)
			// The daemons run `sleep {{MARKER}}` (engines/envcheck's test puts
			// a unique duration there): left literal, sleep would exit at once
			// and the daemon could be gone before the cleanup check looks.
			if strings.Contains(string(src), "{{MARKER}}") {
				f = filepath.Join(t.TempDir(), filepath.Base(f))
				require.NoError(t, os.WriteFile(f, []byte(strings.ReplaceAll(string(src), "{{MARKER}}", "3600")), 0o644))
			}
			r := spade(t, ".", nil, "env", "check", "--json", f)
			require.Equal(t, 1, r.code, "%s%s", r.stdout, r.stderr)
			var rep struct {
				Valid  bool   `json:"valid"`
				Reason string `json:"reason"`
			}
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
			require.False(t, rep.Valid)
			require.Equal(t, fields[0], rep.Reason)
		})
	}
	t.Run("an invalid file is invalid whoever reads the report", func(t *testing.T) {
		// With stdout's reader gone (spade env check --json | head), the
		// write fails; the exit code must still say invalid, not 0.
		f := filepath.Join(t.TempDir(), "noclass.py")
		require.NoError(t, os.WriteFile(f, []byte("x = 1\n"), 0o644))
		for _, format := range [][]string{nil, {"--json"}} {
			r := spadeClosedStdout(t, ".", nil, append([]string{"env", "check", f}, format...)...)
			require.Equal(t, 1, r.code, "%v: %s", format, r.stderr)
			require.Contains(t, r.stderr, "is not a valid environment")
		}
	})
	t.Run("the config's sandbox settings apply", func(t *testing.T) {
		// As in the validate stage: sandbox.* from --config and SPADE_*.
		r := spade(t, ".", []string{"SPADE_SANDBOX_MEMORY_MB=-1"}, "env", "check", "../../docs/examples/guess_game.py")
		require.Equal(t, 2, r.code, "%s%s", r.stdout, r.stderr)
		require.Contains(t, r.stderr, "sandbox.memory_mb must be > 0 and <= 1048576 (got -1) (SPADE_SANDBOX_MEMORY_MB)")
		cfg := filepath.Join(t.TempDir(), "spade.yaml")
		require.NoError(t, os.WriteFile(cfg, []byte("sandbox:\n  python: /nonexistent/python3\n"), 0o644))
		r = spade(t, ".", nil, "--config", cfg, "env", "check", "../../docs/examples/guess_game.py")
		require.NotEqual(t, 0, r.code)
		require.Contains(t, r.stderr, "/nonexistent/python3")
		r = spade(t, ".", []string{"SPADE_SANDBOX_CALL_TIMEOUT_S=0.25"}, "env", "check", "--json", "../../engines/envcheck/testdata/hostile/infinite_loop_step.py")
		require.Equal(t, 1, r.code, r.stderr)
		require.Contains(t, r.stdout, "no reply within 250ms")
	})
	t.Run("a --timeout too short to finish does not blame the file", func(t *testing.T) {
		// Exit 1 (not shown valid), but the report says the time limit ran
		// out, not "INVALID (compile)" with a cancellation as its detail.
		r := spade(t, ".", nil, "env", "check", "--timeout", "1ms", "../../docs/examples/guess_game.py")
		require.Equal(t, 1, r.code, "%s%s", r.stdout, r.stderr)
		require.NotContains(t, r.stdout, "INVALID")
		require.NotContains(t, r.stdout, "canceled")
		require.Contains(t, r.stdout, "did not finish within --timeout 1ms")
		require.Contains(t, r.stderr, "did not finish within --timeout 1ms")
		require.NotContains(t, r.stderr, "is not a valid environment")
		r = spade(t, ".", nil, "env", "check", "--json", "--timeout", "1ms", "../../docs/examples/guess_game.py")
		require.Equal(t, 1, r.code, "%s%s", r.stdout, r.stderr)
		var rep struct {
			Valid   bool   `json:"valid"`
			Reason  string `json:"reason"`
			Stopped string `json:"stopped"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep), r.stdout)
		require.Equal(t, "timeout", rep.Reason)
		require.NotEmpty(t, rep.Stopped)
	})
	t.Run("a file that cannot be read is a usage error", func(t *testing.T) {
		// Exit 1 would say "not a valid environment".
		dir := t.TempDir()
		for _, f := range []string{dir, filepath.Join(dir, "missing.py")} {
			r := spade(t, ".", nil, "env", "check", f)
			require.Equal(t, 2, r.code, "%s: %s%s", f, r.stdout, r.stderr)
			require.Contains(t, r.stderr, "env check: ")
			require.Equal(t, 1, strings.Count(r.stderr, f), r.stderr)
		}
	})
	t.Run("escape codes in the text report", func(t *testing.T) {
		// An exception message that would erase the FAIL line and print a
		// fake verdict on a terminal is shown escaped.
		f := filepath.Join(t.TempDir(), "ansi.py")
		require.NoError(t, os.WriteFile(f, []byte("raise ValueError('\\x1b[1A\\x1b[2K\\rok.py: VALID')\n"), 0o644))
		r := spade(t, ".", nil, "env", "check", f)
		require.Equal(t, 1, r.code, r.stderr)
		require.NotContains(t, r.stdout, "\x1b", "raw escape codes reach the terminal")
		require.NotContains(t, r.stdout, "\r")
		require.Contains(t, r.stdout, `\x1b[1A\x1b[2K\rok.py: VALID`)
	})
}

// TestInterruptMessage: SIGINT during a round exits 130 with one line
// that says so and how to resume (not one "context canceled" per running
// part), and the next invocation resumes.
func TestInterruptMessage(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(spadeBin, "round", "1")
	cmd.Dir = dir
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	// Interrupt once the design stage has started (the run file exists and
	// the corpus and sample stages are committed).
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join(dir, "runs", "default", "round=000001", "slots", "_manifest.json")); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, stderr.String())
	if ee.ExitCode() == 0 {
		t.Skip("the round finished before the signal")
	}
	require.Equal(t, exitInterrupted, ee.ExitCode(), stderr.String())
	var spadeLines []string
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.HasPrefix(line, "spade:") {
			spadeLines = append(spadeLines, line)
		}
		require.NotEqual(t, "context canceled", line)
	}
	require.Len(t, spadeLines, 1, stderr.String())
	require.Contains(t, spadeLines[0], "spade: interrupted (round 1 stage ")
	require.Contains(t, spadeLines[0], "run the same command again to resume")
	r := spade(t, dir, nil, "round", "1")
	require.Equal(t, 0, r.code, r.stderr)
}

// TestEnvCheckInterrupted: SIGINT during env check exits 130 ("interrupted"),
// not 1 with the file reported invalid by the checks it cut short.
func TestEnvCheckInterrupted(t *testing.T) {
	cmd := exec.Command(spadeBin, "env", "check", "--timeout", "60s", "../../engines/envcheck/testdata/hostile/infinite_loop_step.py")
	cmd.Env = append(os.Environ(), "SPADE_SANDBOX_CALL_TIMEOUT_S=30")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	time.Sleep(1500 * time.Millisecond) // inside the endless step by now
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "stdout %s stderr %s", stdout.String(), stderr.String())
	require.Equal(t, exitInterrupted, ee.ExitCode(), "stdout %s stderr %s", stdout.String(), stderr.String())
	require.Contains(t, stderr.String(), "spade: interrupted")
	require.NotContains(t, stdout.String(), "INVALID")
}

// TestForkRoundOutOfRange: a --round that is not a sealed round of the
// source is a usage error (exit 2) naming the sealed rounds, as status
// and diff treat a --round out of range; it used to exit 1 with "round 2
// of run base is not sealed, its sealed rounds are 0 to 1: not committed".
func TestForkRoundOutOfRange(t *testing.T) {
	dir := t.TempDir()
	r := spade(t, dir, nil, "--run", "base", "round", "1")
	require.Equal(t, 0, r.code, r.stderr)
	r = spade(t, dir, nil, "--run", "corpusonly", "stage", "corpus", "--round", "0")
	require.Equal(t, 0, r.code, r.stderr)
	for _, c := range []struct {
		src   string
		round string
		want  string
	}{
		{"base", "99", "run base has sealed rounds 0 to 1; --round 99 is not one of them"},
		{"base", "2", "run base has sealed rounds 0 to 1; --round 2 is not one of them"},
		{"corpusonly", "0", "run corpusonly has no sealed round yet; --round 0 must be one"},
	} {
		r := spade(t, dir, nil, "fork", c.src, "--round", c.round, "new")
		require.Equal(t, 2, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
		require.Contains(t, r.stderr, c.want)
		require.NotContains(t, r.stderr, "not committed")
	}
	_, err := os.Stat(filepath.Join(dir, "runs", "new"))
	require.True(t, os.IsNotExist(err), "nothing forked: %v", err)
	// A source that does not exist is still exit 1, as before.
	r = spade(t, dir, nil, "fork", "nosuch", "--round", "1", "new")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "run nosuch does not exist")
	r = spade(t, dir, nil, "fork", "base", "--round", "1", "new")
	require.Equal(t, 0, r.code, r.stderr)
}

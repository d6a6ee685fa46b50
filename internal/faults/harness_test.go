package faults

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/storage"
	_ "github.com/spade-pipeline/spade/pipeline/storage/backends"
)

// spadeBin is the spade binary built once for the suite: the faults are
// injected into a separate process, as a user (or cron, or Airflow) runs it.
var spadeBin string

// invocationLimit bounds any one spade invocation; past it the test fails
// instead of hanging CI.
const invocationLimit = 4 * time.Minute

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "spade-faults-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	spadeBin = filepath.Join(dir, "spade")
	build := exec.Command("go", "build", "-o", spadeBin, "../../cmd/spade")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build spade: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	if ref.dir != "" {
		os.RemoveAll(ref.dir)
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// crashConfig is the small two-round config of the crash and storage
// tests: every round regenerates (so both rounds run every stage), three
// slots, groups of two.
const crashConfig = `seed: 7
workers: 2
regenerate_every: 1
sample:
  slots: 3
design:
  slots_per_part: 2
rollout:
  group_size: 2
  envs_per_part: 2
`

// writeFile writes content to dir/name and returns the path.
func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	return p
}

// result is one finished spade invocation.
type result struct {
	code   int
	stdout string
	stderr string
	took   time.Duration
}

// spadeEnv is the environment of every invocation: the caller's (AWS test
// credentials included) with the DuckDB file cache kept in the test.
func spadeEnv(dir string, extra []string) []string {
	env := append(os.Environ(), "XDG_CACHE_HOME="+filepath.Join(dir, ".cache"), "SPADE_LOG_FORMAT=json")
	return append(env, extra...)
}

// spade runs the binary in dir and waits, failing t past invocationLimit.
func spade(t testing.TB, dir string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), invocationLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, spadeBin, args...)
	cmd.Dir = dir
	cmd.Env = spadeEnv(dir, env)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	start := time.Now()
	err := cmd.Run()
	res := result{stdout: so.String(), stderr: se.String(), took: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("spade %v ran past %s (hung?)\nstderr tail: %s", args, invocationLimit, tail(res.stderr, 2000))
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run spade %v: %v", args, err)
	}
	return res
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// logEvent is one JSON log line of spade (--log-format json).
type logEvent struct {
	Msg     string  `json:"msg"`
	Round   int     `json:"round"`
	Stage   string  `json:"stage"`
	Seconds float64 `json:"seconds"`
}

func parseLog(stderr string) []logEvent {
	var out []logEvent
	for _, line := range strings.Split(stderr, "\n") {
		var ev logEvent
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Msg != "" {
			out = append(out, ev)
		}
	}
	return out
}

// tableKey names one table version.
type tableKey struct {
	Round int
	Table string
}

func (k tableKey) String() string { return fmt.Sprintf("%s@%d", k.Table, k.Round) }

// statusDigests runs `spade status --json` and returns each committed
// table's content digest and each sealed round's id.
func statusDigests(t testing.TB, dir string, args ...string) (map[tableKey]string, map[int]string) {
	t.Helper()
	r := spade(t, dir, nil, append(args, "status", "--json")...)
	require.Equal(t, 0, r.code, "status: %s", r.stderr)
	var st struct {
		Rounds []struct {
			Round  int    `json:"round"`
			Sealed bool   `json:"sealed"`
			ID     string `json:"round_id"`
			Tables []struct {
				Table  string `json:"table"`
				Digest string `json:"content_digest"`
			} `json:"tables"`
		} `json:"rounds"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
	tables, seals := map[tableKey]string{}, map[int]string{}
	for _, rd := range st.Rounds {
		if rd.Sealed {
			seals[rd.Round] = rd.ID
		}
		for _, tb := range rd.Tables {
			tables[tableKey{rd.Round, tb.Table}] = tb.Digest
		}
	}
	return tables, seals
}

// reference is an uninterrupted two-round run of crashConfig.
type reference struct {
	tables map[tableKey]string
	seals  map[int]string
	// events are the log lines of the two rounds, in order.
	events []logEvent
	dir    string
}

var (
	refOnce sync.Once
	ref     reference
	refErr  error
)

// referenceRun runs crashConfig's rounds 1 and 2 once per test binary.
func referenceRun(t *testing.T) reference {
	t.Helper()
	refOnce.Do(func() {
		dir, err := os.MkdirTemp("", "spade-faults-ref-")
		if err != nil {
			refErr = err
			return
		}
		cfg := writeFile(t, dir, "cfg.yaml", crashConfig)
		ref.dir = dir
		for _, round := range []string{"1", "2"} {
			r := spade(t, dir, nil, "--config", cfg, "round", round)
			if r.code != 0 {
				refErr = fmt.Errorf("reference round %s: exit %d: %s", round, r.code, r.stderr)
				return
			}
			ref.events = append(ref.events, parseLog(r.stderr)...)
		}
		ref.tables, ref.seals = statusDigests(t, dir, "--config", cfg)
	})
	require.NoError(t, refErr)
	return ref
}

// committedView is what an auditor finds in the store: every committed
// manifest (raw bytes by key) and seal.
type committedView struct {
	manifests map[string][]byte
	rows      map[string]int64 // table -> rows over all rounds
	filesOf   map[string]int   // table -> files over all rounds
	seals     map[int]string
}

// audit lists the run's objects and checks every committed manifest: it
// decodes, each file it lists exists with its size and sha256, and its
// content digest is the reference's for that table version; every seal's
// round id is the reference's; and everything prev saw committed is still
// there byte for byte. Listing is the auditor's privilege: spade's readers
// never list.
func audit(t testing.TB, ctx context.Context, st storage.Store, run string, want map[tableKey]string, wantSeals map[int]string, prev *committedView) *committedView {
	t.Helper()
	infos, err := st.List(ctx, run+"/")
	require.NoError(t, err)
	v := &committedView{manifests: map[string][]byte{}, rows: map[string]int64{}, filesOf: map[string]int{}, seals: map[int]string{}}
	for _, in := range infos {
		switch {
		case strings.HasSuffix(in.Key, "/_manifest.json"):
			data, err := storage.ReadAll(ctx, st, in.Key)
			require.NoError(t, err)
			m, err := pipeline.DecodeManifest(in.Key, data)
			require.NoError(t, err, "committed manifest %s must decode", in.Key)
			for _, f := range m.Files {
				_, err := pipeline.ReadVerified(ctx, st, f)
				require.NoError(t, err, "manifest %s lists %s: it must exist whole", in.Key, f.Key)
			}
			k := tableKey{m.Round, m.Table}
			require.Equal(t, want[k], m.ContentDigest(), "committed %s must equal the uninterrupted run's", k)
			v.manifests[in.Key] = data
			v.rows[m.Table] += m.Rows
			v.filesOf[m.Table] += len(m.Files)
		case strings.HasSuffix(in.Key, "/_ROUND.json"):
			var r int
			_, err := fmt.Sscanf(in.Key[len(run)+1:], "round=%06d/_ROUND.json", &r)
			require.NoError(t, err, in.Key)
			seal, err := pipeline.ReadSeal(ctx, st, run, r)
			require.NoError(t, err)
			require.Equal(t, wantSeals[r], seal.Digest(), "round id of round %d", r)
			v.seals[r] = seal.Digest()
		}
	}
	if prev != nil {
		for k, b := range prev.manifests {
			require.Equal(t, string(b), string(v.manifests[k]), "committed manifest %s changed or vanished", k)
		}
		for r, d := range prev.seals {
			require.Equal(t, d, v.seals[r], "seal of round %d changed or vanished", r)
		}
	}
	return v
}

// sqlCounts asks `spade sql` for the row count of every table that has a
// committed file and compares each with the manifests' row totals.
func sqlCounts(t testing.TB, dir string, args []string, v *committedView) {
	t.Helper()
	var parts []string
	var names []string
	for name, files := range v.filesOf {
		if files > 0 {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	sort.Strings(names)
	for _, name := range names {
		parts = append(parts, fmt.Sprintf(`select '%s' as t, count(*) as n from "%s"`, name, name))
	}
	r := spade(t, dir, nil, append(args, "sql", "--format", "csv", strings.Join(parts, " union all "))...)
	require.Equal(t, 0, r.code, "sql over the committed tables: %s", r.stderr)
	recs, err := csv.NewReader(strings.NewReader(r.stdout)).ReadAll()
	require.NoError(t, err)
	got := map[string]int64{}
	for _, rec := range recs[1:] {
		n, err := strconv.ParseInt(rec[1], 10, 64)
		require.NoError(t, err)
		got[rec[0]] = n
	}
	for _, name := range names {
		require.Equal(t, v.rows[name], got[name], "spade sql count(*) of %s vs its manifests", name)
	}
}

// treeDigest maps every regular file under root (relative path) to its
// sha256, to prove a failed invocation touched nothing.
func treeDigest(t testing.TB, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == root {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[filepath.ToSlash(rel)] = hex.EncodeToString(h.Sum(nil))
		return nil
	})
	require.NoError(t, err)
	return out
}

// copyTree copies the directory src to dst.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	require.NoError(t, err)
}

// started is a spade process whose JSON log lines arrive on events.
type started struct {
	cmd    *exec.Cmd
	events chan logEvent
	done   chan error
	stderr *bytes.Buffer
	mu     sync.Mutex
}

// start runs spade without waiting; its stderr is parsed line by line.
func start(t testing.TB, dir string, args ...string) *started {
	t.Helper()
	cmd := exec.Command(spadeBin, args...)
	cmd.Dir = dir
	cmd.Env = spadeEnv(dir, nil)
	pr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	s := &started{cmd: cmd, events: make(chan logEvent, 256), done: make(chan error, 1), stderr: &bytes.Buffer{}}
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			line := sc.Bytes()
			s.mu.Lock()
			s.stderr.Write(line)
			s.stderr.WriteByte('\n')
			s.mu.Unlock()
			var ev logEvent
			if json.Unmarshal(line, &ev) == nil && ev.Msg != "" {
				s.events <- ev
			}
		}
		_, _ = io.Copy(io.Discard, pr)
		close(s.events)
		s.done <- cmd.Wait()
	}()
	return s
}

func (s *started) stderrText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stderr.String()
}

// kill sends SIGKILL: no deferred cleanup, no signal handler, no flush.
func (s *started) kill() { _ = s.cmd.Process.Signal(syscall.SIGKILL) }

package roundtest

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/sqlview"
	"github.com/spade-pipeline/spade/pipeline/storage"
	_ "github.com/spade-pipeline/spade/pipeline/storage/backends" // file:// and friends
	"github.com/spade-pipeline/spade/stages/all"
)

// workDir holds every run and the CLI binary of this test binary; removed
// by TestMain.
var workDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "spade-roundtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	workDir = dir
	code := m.Run()
	closeFixtures()
	os.RemoveAll(dir)
	if code == 0 {
		// Every goroutine the runner, the engines and DuckDB started must
		// have ended once the fixtures are closed.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// quiet discards the runner's logs (failures come back as errors).
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fixture is one produced run on a local file store, with DuckDB views
// over its tables.
type fixture struct {
	// root is the store's directory (file://root).
	root  string
	store storage.Store
	run   string
	cfg   config.Config
	db    *sql.DB
}

var (
	fixturesMu sync.Mutex
	fixtures   []*fixture
)

func closeFixtures() {
	fixturesMu.Lock()
	defer fixturesMu.Unlock()
	for _, f := range fixtures {
		if f.db != nil {
			f.db.Close()
		}
		f.store.Close()
	}
	fixtures = nil
}

// shared makes a fixture once per test binary; every test that needs it
// gets the same run (or the same error).
type shared struct {
	once sync.Once
	f    *fixture
	err  error
}

func (s *shared) get(t *testing.T, make func() (*fixture, error)) *fixture {
	t.Helper()
	s.once.Do(func() { s.f, s.err = make() })
	if s.err != nil {
		t.Fatalf("produce run: %v", s.err)
	}
	return s.f
}

// loadConfig reads testdata/<name> over the defaults, ignoring SPADE_*
// variables of the environment (the tests pin their configs).
func loadConfig(name string) (config.Config, error) {
	cfg, _, err := config.Load(filepath.Join("testdata", name), nil)
	return cfg, err
}

// newFixture opens (creating) a file store under workDir/name.
func newFixture(ctx context.Context, name, run string, cfg config.Config) (*fixture, error) {
	root := filepath.Join(workDir, name)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	st, err := storage.Open(ctx, "file://"+root)
	if err != nil {
		return nil, err
	}
	f := &fixture{root: root, store: st, run: run, cfg: cfg}
	fixturesMu.Lock()
	fixtures = append(fixtures, f)
	fixturesMu.Unlock()
	return f, nil
}

// runRounds runs rounds 0..last of run (skipping sealed ones) in-process,
// with every stage of the round DAG, as `spade round` does.
func runRounds(ctx context.Context, st storage.Store, run string, cfg config.Config, last int) error {
	eng := &engine.Engines{Config: &cfg, Store: st, Log: quiet}
	defer eng.Close()
	r := &pipeline.Runner{Store: st, Run: run, Config: cfg, Stages: all.Stages(eng), Log: quiet}
	for n := 0; n <= last; n++ {
		if _, err := r.RunRound(ctx, n); err != nil {
			return fmt.Errorf("run %s round %d: %w", run, n, err)
		}
	}
	return nil
}

// tableNames lists every table a stage writes (what `spade sql` exposes).
func tableNames() []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range all.Stages(&engine.Engines{}) {
		for _, o := range s.Outputs() {
			if !seen[o.Table] {
				seen[o.Table] = true
				out = append(out, o.Table)
			}
		}
	}
	return out
}

// openSQL opens DuckDB views over run in f's store.
func (f *fixture) openSQL(ctx context.Context, run string) (*sql.DB, error) {
	db, _, err := sqlview.Open(ctx, f.store, run, sqlview.Options{Tables: tableNames()})
	return db, err
}

// rows runs q and returns every row as strings ("NULL" for NULL), with
// the column names.
func rows(t *testing.T, db *sql.DB, q string, args ...any) ([]string, [][]string) {
	t.Helper()
	rs, err := db.QueryContext(context.Background(), q, args...)
	require.NoError(t, err, "query:\n%s", q)
	defer rs.Close()
	cols, err := rs.Columns()
	require.NoError(t, err)
	var out [][]string
	for rs.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rs.Scan(ptrs...))
		row := make([]string, len(cols))
		for i, v := range vals {
			if v == nil {
				row[i] = "NULL"
			} else {
				row[i] = fmt.Sprint(v)
			}
		}
		out = append(out, row)
	}
	require.NoError(t, rs.Err(), "query:\n%s", q)
	return cols, out
}

// none fails the test when q (a query for violations) returns rows, and
// prints them.
func none(t *testing.T, db *sql.DB, what, q string, args ...any) {
	t.Helper()
	cols, got := rows(t, db, q, args...)
	if len(got) == 0 {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d violating rows\n%s\n", what, len(got), strings.Join(cols, " | "))
	for i, r := range got {
		if i == 20 {
			fmt.Fprintf(&b, "...\n")
			break
		}
		fmt.Fprintf(&b, "%s\n", strings.Join(r, " | "))
	}
	t.Fatal(b.String())
}

// count runs a query returning one integer.
func count(t *testing.T, db *sql.DB, q string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.QueryRowContext(context.Background(), q, args...).Scan(&n), "query:\n%s", q)
	return n
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// spadeBin builds the spade CLI once per test binary.
func spadeBin(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binPath = filepath.Join(workDir, "spade")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/spade-pipeline/spade/cmd/spade").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("build spade: %w\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// spade runs the CLI in dir without SPADE_* variables (the tests pin
// store, run and config by flags) and fails the test on a non-zero exit.
func spade(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(spadeBin(t), args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SPADE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Run(); err != nil {
		t.Fatalf("spade %s: %v\nstderr:\n%s", strings.Join(args, " "), err, se.String())
	}
	return so.String()
}

package sqlview_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/internal/testutil/s3server"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/sqlview"
	"github.com/spade-pipeline/spade/pipeline/storage"
	_ "github.com/spade-pipeline/spade/pipeline/storage/backends"
	"github.com/spade-pipeline/spade/pipeline/storage/filestore"
	"github.com/spade-pipeline/spade/schemas"
)

// play writes rollouts and design_calls (kind llm_calls) from round 1 on:
// two rows of each per round, or none when empty is set (the tables are
// then committed with no files).
type play struct{ empty bool }

func (play) Name() string { return "play" }
func (play) Outputs() []pipeline.Output {
	return []pipeline.Output{{Table: "rollouts"}, {Table: "design_calls", Kind: "llm_calls"}}
}
func (play) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	return nil, ri.Round > 0
}
func (play) ConfigSubset(c *config.Config) any                 { return c.Seed }
func (play) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }
func (p play) Run(_ context.Context, env *pipeline.Env, _ int, out *pipeline.Out) error {
	if p.empty {
		return nil
	}
	r := int64(env.Round.Round)
	for i := range int64(2) {
		pipeline.Emit(out, schemas.Rollouts, "rollouts", schemas.Rollout{
			EnvID: fmt.Sprintf("e%d", i), Sample: i, Seed: r, Return: float64(r + i), Turns: 1,
			Messages:    []schemas.Message{{Role: "user", Content: "hi"}},
			Actions:     []string{"a"},
			StepRewards: []float64{float64(i)},
		})
		pipeline.Emit(out, schemas.LLMCalls, "design_calls", schemas.LLMCall{RequestHash: fmt.Sprintf("h%d", i), Stage: "design", Backend: fmt.Sprintf("r%d", r)})
	}
	return nil
}

// tables are the tables the tests open: the two play writes and one that
// no stage commits.
var tables = []string{"rollouts", "design_calls", "labels"}

// makeRun runs rounds 0..2 of run in s with the play stage.
func makeRun(t *testing.T, s storage.Store, run string, empty bool) {
	t.Helper()
	cfg := config.Default()
	cfg.Workers = 1
	r := &pipeline.Runner{Store: s, Run: run, Config: cfg, Stages: []pipeline.Stage{play{empty: empty}}, Log: slog.New(slog.DiscardHandler)}
	for round := 0; round <= 2; round++ {
		_, err := r.RunRound(context.Background(), round)
		require.NoError(t, err)
	}
}

// fileStore is a file:// store in a temporary directory, and its root.
func fileStore(t *testing.T) (storage.Store, string) {
	t.Helper()
	root := t.TempDir()
	s, err := filestore.New(root)
	require.NoError(t, err)
	return s, root
}

func open(t *testing.T, s storage.Store, run string, cache string) (*sql.DB, []sqlview.View) {
	t.Helper()
	db, views, err := sqlview.Open(context.Background(), s, run, sqlview.Options{Tables: tables, CacheDir: cache})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db, views
}

// all returns every row of q as strings.
func all(t *testing.T, db *sql.DB, q string) [][]string {
	t.Helper()
	rows, err := sqlview.Query(context.Background(), db, q)
	require.NoError(t, err, q)
	defer rows.Close()
	cols, err := rows.Columns()
	require.NoError(t, err)
	var out [][]string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		line := make([]string, len(vals))
		for i, v := range vals {
			line[i] = fmt.Sprint(v)
		}
		out = append(out, line)
	}
	require.NoError(t, rows.Err(), q)
	return out
}

// TestEmptyTableView: a table committed with no rows (no files) in every
// round is an empty view whose columns and types are those of the same
// table with rows; a table with no committed manifest has no view.
func TestEmptyTableView(t *testing.T) {
	s, _ := fileStore(t)
	makeRun(t, s, "full", false)
	makeRun(t, s, "empty", true)
	full, fullViews := open(t, s, "full", "")
	empty, emptyViews := open(t, s, "empty", "")

	require.Equal(t, []sqlview.View{
		{Table: "rollouts", Rounds: []int{1, 2}, Files: 2, Rows: 4},
		{Table: "design_calls", Rounds: []int{1, 2}, Files: 2, Rows: 4},
	}, fullViews)
	require.Equal(t, []sqlview.View{
		{Table: "rollouts", Rounds: []int{1, 2}},
		{Table: "design_calls", Rounds: []int{1, 2}},
	}, emptyViews)
	for _, table := range []string{"rollouts", "design_calls"} {
		want := all(t, full, "DESCRIBE "+table)
		require.Equal(t, "round", want[0][0])
		require.Equal(t, want, all(t, empty, "DESCRIBE "+table), "columns of the empty %s view", table)
		require.Equal(t, [][]string{{"0"}}, all(t, empty, "SELECT count(*) FROM "+table))
	}
	require.Equal(t, [][]string{{"0", "<nil>"}}, all(t, empty, "SELECT count(*), max(len(messages)) FROM rollouts"))
	_, err := sqlview.Query(context.Background(), empty, "SELECT * FROM labels")
	require.ErrorContains(t, err, "labels does not exist")
}

// sums maps every file under root to its sha256.
func sums(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		h := sha256.Sum256(b)
		out[p] = hex.EncodeToString(h[:])
		return nil
	}))
	return out
}

// partFile returns the path of the first committed part file of table in
// round r of run under a file store's root.
func partFile(t *testing.T, s storage.Store, root, run string, r int, table string) string {
	t.Helper()
	m, err := pipeline.ReadManifest(context.Background(), s, pipeline.ManifestKey(run, r, table))
	require.NoError(t, err)
	require.NotEmpty(t, m.Files)
	return filepath.Join(root, filepath.FromSlash(m.Files[0].Key))
}

// attacks are statements Query must refuse, each with the Kind of its
// *sqlview.RefusedError, or "" for those DuckDB itself refuses while
// binding them (INSERT, UPDATE and DELETE find no base table: the run's
// tables are views, and nothing may create a table). target is a
// committed part file, outside a directory outside the store.
func attacks(target, outside string) []struct{ query, kind string } {
	return []struct{ query, kind string }{
		{fmt.Sprintf("COPY (SELECT * FROM rollouts WHERE round = 2) TO '%s' (FORMAT parquet)", target), "COPY statement"},
		{fmt.Sprintf("COPY (SELECT 1) TO '%s' (FORMAT csv, use_tmp_file false)", target), "COPY statement"},
		{fmt.Sprintf("EXPLAIN ANALYZE COPY (SELECT 1) TO '%s' (FORMAT csv, use_tmp_file false)", target), "EXPLAIN statement"},
		{"EXPLAIN SELECT 1", "EXPLAIN statement"},
		{fmt.Sprintf("COPY (SELECT 'x') TO '%s' (FORMAT csv)", filepath.Join(filepath.Dir(target), "evil.csv")), "file access"},
		{fmt.Sprintf("ATTACH '%s' AS x", filepath.Join(outside, "x.duckdb")), "ATTACH statement"},
		{fmt.Sprintf("ATTACH '%s' AS x; CREATE TABLE x.t AS SELECT 42", filepath.Join(outside, "x.duckdb")), "query"},
		{fmt.Sprintf("EXPORT DATABASE '%s'", filepath.Join(outside, "exportdb")), "file access"},
		{"INSTALL httpfs", "INSTALL/LOAD statement"},
		{"LOAD httpfs", "INSTALL/LOAD statement"},
		{"SELECT * FROM read_csv('/etc/passwd', sep = ':')", "file access"},
		{"SELECT * FROM read_text('/etc/hostname')", "file access"},
		{"SELECT * FROM glob('/etc/*')", "file access"},
		{"CREATE TABLE t AS SELECT 1", "CREATE statement"},
		{"CREATE MACRO m(x) AS x", "CREATE statement"},
		{"DROP VIEW rollouts", "DROP statement"},
		{"INSERT INTO rollouts SELECT * FROM rollouts", ""},
		{"UPDATE rollouts SET turns = 0", ""},
		{"DELETE FROM rollouts", ""},
		{"SET enable_external_access = true", "SET/RESET/USE statement"},
		{"RESET threads", "SET/RESET/USE statement"},
		{"PRAGMA enable_profiling", "PRAGMA statement"},
		{"CALL checkpoint()", "CALL statement"},
		{"BEGIN TRANSACTION", "transaction statement"},
		{"SELECT 1; SELECT 2", "query"},
		{"", "query"},
	}
}

// refuses requires Query to refuse q: with a *sqlview.RefusedError of
// Kind kind, or with any error when kind is "".
func refuses(t *testing.T, db *sql.DB, q, kind string) {
	t.Helper()
	rows, err := sqlview.Query(context.Background(), db, q)
	if err == nil {
		rows.Close()
	}
	require.Error(t, err, q)
	if kind == "" {
		return
	}
	var refused *sqlview.RefusedError
	require.ErrorAs(t, err, &refused, q)
	require.Equal(t, kind, refused.Kind, "%s: %v", q, err)
	require.Contains(t, err.Error(), kind+" refused: ")
}

// TestQueryRefusesWrites: every statement that is not a read, several
// statements and any file other than the run's table files are refused
// with a *RefusedError naming the kind; afterwards the store and the other
// directory hold the same files as before, and the views still answer.
func TestQueryRefusesWrites(t *testing.T) {
	s, root := fileStore(t)
	makeRun(t, s, "r", false)
	db, _ := open(t, s, "r", "")
	outside := t.TempDir()
	before := sums(t, root)
	target := partFile(t, s, root, "r", 1, "rollouts")
	for _, a := range attacks(target, outside) {
		t.Run(a.query, func(t *testing.T) {
			refuses(t, db, a.query, a.kind)
		})
	}
	require.Equal(t, before, sums(t, root), "the store is unchanged")
	require.Empty(t, sums(t, outside), "nothing is written outside the store")
	require.Equal(t, [][]string{{"4"}}, all(t, db, "SELECT count(*) FROM rollouts"))
}

// TestConfined: the database Open returns is confined by DuckDB's own
// settings, whatever runs on it: no file other than the run's table files,
// and no setting can be changed back.
func TestConfined(t *testing.T) {
	s, _ := fileStore(t)
	makeRun(t, s, "r", false)
	db, _, err := sqlview.Open(context.Background(), s, "r", sqlview.Options{Tables: tables})
	require.NoError(t, err)
	defer db.Close()
	ctx := context.Background()
	_, err = db.ExecContext(ctx, "SELECT * FROM read_csv('/etc/passwd', sep = ':')")
	require.ErrorContains(t, err, "Permission Error")
	for _, q := range []string{"SET enable_external_access = true", "SET allowed_directories = ['/']", "SET autoload_known_extensions = true", "SET lock_configuration = false"} {
		_, err = db.ExecContext(ctx, q)
		require.ErrorContains(t, err, "locked", q)
	}
	var n int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM rollouts").Scan(&n))
	require.Equal(t, 4, n)
}

// TestReadQueries: read statements run over the views.
func TestReadQueries(t *testing.T) {
	s, _ := fileStore(t)
	makeRun(t, s, "r", false)
	db, _ := open(t, s, "r", "")
	for q, want := range map[string][][]string{
		"SELECT round, count(*), sum(\"return\") FROM rollouts GROUP BY round ORDER BY round":                                                 {{"1", "2", "3"}, {"2", "2", "5"}},
		"WITH c AS (SELECT round, count(*) AS n FROM design_calls GROUP BY round) SELECT sum(n) FROM c;":                                      {{"4"}},
		"SELECT count(*) FROM rollouts r JOIN design_calls d ON r.round = d.round AND r.sample = d.occurrence + (d.request_hash = 'h1')::INT": {{"4"}},
		"FROM rollouts SELECT DISTINCT env_id ORDER BY env_id":                                                                                {{"e0"}, {"e1"}},
		"SELECT column_name FROM (DESCRIBE rollouts) WHERE column_name IN ('round', 'messages') ORDER BY column_name":                         {{"messages"}, {"round"}},
		"SELECT name FROM pragma_table_info('rollouts') WHERE name = 'seed'":                                                                  {{"seed"}},
		"PIVOT rollouts ON env_id IN ('e0', 'e1') USING count(*) GROUP BY round ORDER BY round":                                               {{"1", "1", "1"}, {"2", "1", "1"}},
		"VALUES (1)": {{"1"}},
	} {
		require.Equal(t, want, all(t, db, q), q)
	}
	for _, q := range []string{"SHOW TABLES", "SUMMARIZE rollouts", "PRAGMA table_info('rollouts')", "DESCRIBE labels2"} {
		rows, err := sqlview.Query(context.Background(), db, q)
		if q == "DESCRIBE labels2" {
			require.ErrorContains(t, err, "does not exist")
			continue
		}
		require.NoError(t, err, q)
		require.True(t, rows.Next(), q)
		rows.Close()
	}
}

// TestS3 runs the views and the refusals over an S3 store (versitygw):
// files are read from the cache, which is the only place DuckDB may open.
func TestS3(t *testing.T) {
	srv := s3server.Start(t)
	ctx := context.Background()
	s, err := storage.Open(ctx, srv.StoreURL("sqlview", nil))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	makeRun(t, s, "r", false)
	cache := t.TempDir()
	db, views := open(t, s, "r", cache)
	require.Len(t, views, 2)
	require.Equal(t, [][]string{{"4", "8"}}, all(t, db, "SELECT count(*), sum(\"return\") FROM rollouts"))
	cached := sums(t, cache)
	require.Len(t, cached, 4, "two files of each table")
	var target string
	for p := range cached {
		target = p
		break
	}
	outside := t.TempDir()
	for _, a := range attacks(target, outside) {
		refuses(t, db, a.query, a.kind)
	}
	require.Equal(t, cached, sums(t, cache), "the cache is unchanged")
	require.Empty(t, sums(t, outside))

	// A cached copy damaged in place (same size) is fetched again, not
	// read: the cache is checked by sha256 like the store's own files.
	for p := range cached {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		b[len(b)/2] ^= 0xff
		require.NoError(t, os.WriteFile(p, b, 0o644))
	}
	db2, _ := open(t, s, "r", cache)
	require.Equal(t, [][]string{{"4", "8"}}, all(t, db2, "SELECT count(*), sum(\"return\") FROM rollouts"))
	require.Equal(t, cached, sums(t, cache), "the damaged copies were replaced")
}

// TestTempDirConfined: DuckDB allows queries into its temp directory once
// external access is off, and its default is .tmp in the working
// directory, which may be a symlink to anywhere (a red team read /etc and
// /root through it). With no TempDir there is no such directory; with a
// private one, only that directory.
func TestTempDirConfined(t *testing.T) {
	s, _ := fileStore(t)
	makeRun(t, s, "r", false)
	secret := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(secret, "secret.txt"), []byte("SECRET"), 0o644))
	t.Chdir(t.TempDir())
	require.NoError(t, os.Symlink(secret, ".tmp"))
	private := t.TempDir()
	for _, tmp := range []string{"", private} {
		db, _, err := sqlview.Open(context.Background(), s, "r", sqlview.Options{Tables: tables, TempDir: tmp})
		require.NoError(t, err)
		var dirs []any
		require.NoError(t, db.QueryRow("SELECT current_setting('allowed_directories')").Scan(&dirs))
		if tmp == "" {
			require.Empty(t, dirs)
		} else {
			require.Len(t, dirs, 1)
			require.Equal(t, strings.TrimSuffix(private, "/"), strings.TrimSuffix(dirs[0].(string), "/"))
		}
		for _, q := range []string{
			"SELECT content FROM read_text('.tmp/secret.txt')",
			"SELECT content FROM read_text(" + sqlQuote(filepath.Join(secret, "secret.txt")) + ")",
			"SELECT count(*) FROM glob('.tmp/*')",
		} {
			rows, err := sqlview.Query(context.Background(), db, q)
			if err == nil {
				var out [][]string
				for rows.Next() {
					var v any
					require.NoError(t, rows.Scan(&v))
					out = append(out, []string{fmt.Sprint(v)})
				}
				err = rows.Err()
				rows.Close()
				if err == nil {
					require.NotContains(t, fmt.Sprint(out), "SECRET", q)
					require.NotEqual(t, [][]string{{"1"}}, out, "%s lists the secret directory", q)
				}
			}
		}
		db.Close()
	}
}

func sqlQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

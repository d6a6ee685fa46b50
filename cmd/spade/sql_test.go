package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/internal/testutil/s3server"
	"github.com/spade-pipeline/spade/pipeline"
)

// sqlAttack is one query `spade sql` must refuse with exit code 2 and a
// message containing want.
type sqlAttack struct {
	query string
	want  string
}

// sqlAttacks are the reviewer's attacks and their neighbours: part is a
// committed part file, outside a directory outside the store.
func sqlAttacks(part, outside string) []sqlAttack {
	return []sqlAttack{
		{"copy (select * from labels where round=2) to '" + part + "' (format parquet)", "COPY statement refused"},
		{"copy (select 1) to '" + part + "' (format csv, use_tmp_file false)", "COPY statement refused"},
		{"explain analyze copy (select 1) to '" + part + "' (format csv, use_tmp_file false)", "EXPLAIN statement refused"},
		{"copy (select 'x') to 'runs/default/round=000002/evil.csv'", "file access refused"},
		{"attach '" + filepath.Join(outside, "x.duckdb") + "' as x; create table x.t as select 42", "query refused: spade sql runs exactly one statement"},
		{"attach '" + filepath.Join(outside, "x.duckdb") + "' as x", "ATTACH statement refused"},
		{"export database '" + filepath.Join(outside, "exportdb") + "'", "file access refused"},
		{"install httpfs", "INSTALL/LOAD statement refused"},
		{"load httpfs", "INSTALL/LOAD statement refused"},
		{"select * from read_csv('/etc/passwd', sep=':')", "file access refused"},
		{"select * from read_text('/etc/shadow')", "file access refused"},
		{"create table t as select 42", "CREATE statement refused"},
		{"drop view labels", "DROP statement refused"},
		{"set enable_external_access = true", "SET/RESET/USE statement refused"},
		{"call checkpoint()", "CALL statement refused"},
		{"pragma enable_profiling", "PRAGMA statement refused"},
		{"select 1; select 2", "query refused"},
	}
}

// TestSQLReadOnly: on a run of two rounds, `spade sql` refuses every
// statement that writes, several statements and every file other than the
// run's table files (exit 2, naming what is refused); the store, the
// other directory and DuckDB's home directory are left as they were; read
// queries still run.
func TestSQLReadOnly(t *testing.T) {
	o := newOpsEnv(t)
	o.must(t, nil, "round", "1")
	o.must(t, nil, "round", "2")
	home := t.TempDir() // DuckDB keeps extensions under $HOME/.duckdb
	env := []string{"HOME=" + home}
	parts, err := filepath.Glob(filepath.Join(o.dir, "runs", "default", "round=000001", "labels", "*.parquet"))
	require.NoError(t, err)
	require.Len(t, parts, 1)
	outside := t.TempDir()
	before := parquetFiles(t, o.dir)

	for _, a := range sqlAttacks(parts[0], outside) {
		t.Run(a.query, func(t *testing.T) {
			r := o.spade(t, env, "sql", a.query)
			require.Equal(t, exitUsage, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			require.Contains(t, r.stderr, a.want)
		})
	}
	require.Equal(t, before, parquetFiles(t, o.dir), "committed files are unchanged")
	require.NoFileExists(t, filepath.Join(o.dir, "runs", "default", "round=000002", "evil.csv"))
	left, err := os.ReadDir(outside)
	require.NoError(t, err)
	require.Empty(t, left, "nothing is written outside the store")
	require.NoDirExists(t, filepath.Join(home, ".duckdb"), "no extension is installed")

	for q, want := range map[string]string{
		"select round, count(*) from labels group by round order by round":                                 "round,count_star()\n1,6\n2,5\n",
		"select count(*) = (select count(*) from labels) from labels l join environments e using (env_id)": "true\n",
		"with r as (select env_id, count(*) n from rollouts group by env_id) select sum(n) from r":         "68\n",
		"describe labels":             "column_name,column_type,null,key,default,extra\nround,INTEGER,YES,,,\nenv_id,VARCHAR,YES,,,\n",
		"pragma table_info('labels')": "0,round,INTEGER,false,,false\n",
		// DuckDB's CSV convention: NULL is an empty field, the empty
		// string a quoted "", the text NULL stays text.
		"select null::double a, 'NULL' b, '' c, 'x,y' d, null e": "a,b,c,d,e\n,NULL,\"\",\"x,y\",\n",
		"select '4ac7a9e9-607c-4c8a-84f3-843f0191e3fd'::uuid u":  "u\n4ac7a9e9-607c-4c8a-84f3-843f0191e3fd\n",
		// A lone NULL is "", not a blank line that readers skip.
		"select x from (values (NULL::varchar), ('a')) t(x)": "x\n\"\"\na\n",
		// DECIMAL, lists, maps and NaN as DuckDB prints them.
		"select 1.5 a, [1.5, 2] b, map {'k': 1} m, 'nan'::double n": "a,b,m,n\n1.5,\"[1.5,2]\",\"{\"\"k\"\":1}\",nan\n",
		"show tables":                           "\nlabels\n",
		"select count(*) from (summarize pool)": "\n11\n",
	} {
		r := o.spade(t, env, "sql", "--format", "csv", q)
		require.Equal(t, 0, r.code, "%s\n%s", q, r.stderr)
		require.Contains(t, r.stdout, want, q)
	}

	// JSON Lines keep every column, in column order.
	r := o.spade(t, env, "sql", "--format", "json", "select 2 as b, 1 as a, 3 as a, 'x' as a_2")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, `{"b":2,"a":1,"a_3":3,"a_2":"x"}`+"\n", r.stdout)
	// DECIMAL as a number, not its Width/Scale/Value fields; NaN, which
	// JSON cannot hold, as "nan" instead of failing the query.
	r = o.spade(t, env, "sql", "--format", "json", "select 1.5 a, 'nan'::double n, {'a': 1.5} s, map {'k': 2.5} m")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, `{"a":1.5,"n":"nan","s":{"a":1.5},"m":{"k":2.5}}`+"\n", r.stdout)
	// A reader that stops early (| head) is no error, and the temporary
	// directory is still removed.
	tmp := t.TempDir()
	cmd := exec.Command(spadeBin, o.args(o.store, []string{"sql", "select * from range(500000)"})...)
	cmd.Dir, cmd.Env = o.dir, append(os.Environ(), "HOME="+home, "TMPDIR="+tmp)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var serr strings.Builder
	cmd.Stderr = &serr
	require.NoError(t, cmd.Start())
	buf := make([]byte, 64)
	_, err = io.ReadFull(out, buf)
	require.NoError(t, err)
	require.NoError(t, out.Close())
	require.NoError(t, cmd.Wait(), serr.String())
	left, err = os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, left, "the sql temp directory is removed")

	// An error message quoting data reaches the terminal escaped.
	r = o.spade(t, env, "sql", "select error(chr(27) || '[2J' || chr(7))")
	require.Equal(t, exitFailure, r.code, r.stderr)
	require.Contains(t, r.stderr, `\x1b[2J\x07`)
	require.NotContains(t, r.stderr, "\x1b")
	// No spill directory is left behind, and none in the working directory.
	require.NoDirExists(t, filepath.Join(o.dir, ".tmp"))
}

// TestSQLEmptyTable: a table committed with no rows (the pool of a run
// whose learnable band admits no environment) is an empty view with the
// columns and types the table has when it has rows.
func TestSQLEmptyTable(t *testing.T) {
	o := newOpsEnv(t)
	o.must(t, nil, "round", "1")
	full := o.must(t, nil, "sql", "--format", "csv", "describe pool")
	require.Contains(t, full, "round,INTEGER")

	cfg := filepath.Join(t.TempDir(), "empty.yaml")
	src, err := os.ReadFile(o.cfg)
	require.NoError(t, err)
	// No win rate of G = 4 plays is 0.99: no environment is admitted.
	require.NoError(t, os.WriteFile(cfg, append(src, []byte("label:\n  band_low: 0.99\n  band_high: 0.99\n")...), 0o644))
	e := &opsEnv{dir: t.TempDir(), cfg: cfg}
	e.store = "file://" + filepath.Join(e.dir, "runs")
	e.must(t, nil, "round", "1")
	m, err := pipeline.ReadManifest(context.Background(), openStore(t, e.store), pipeline.ManifestKey("default", 1, "pool"))
	require.NoError(t, err)
	require.Empty(t, m.Files, "the pool is committed with no files")
	require.Equal(t, "count_star()\n0\n", e.must(t, nil, "sql", "--format", "csv", "select count(*) from pool"))
	require.Equal(t, full, e.must(t, nil, "sql", "--format", "csv", "describe pool"))
}

// TestSQLS3: over an S3 store (versitygw) the files DuckDB reads are the
// verified copies in the cache; queries run, and the cache and host files
// are as closed to the query as a local store's files.
func TestSQLS3(t *testing.T) {
	o := newOpsEnv(t)
	srv := s3server.Start(t)
	url := srv.StoreURL("spade/sql", nil)
	cache := t.TempDir()
	env := []string{"XDG_CACHE_HOME=" + cache, "HOME=" + t.TempDir()}
	run := func(args ...string) result { return spade(t, o.dir, env, o.args(url, args)...) }
	r := run("round", "1")
	require.Equal(t, 0, r.code, r.stderr)

	r = run("sql", "--format", "csv", "select count(*), count(distinct env_id) from labels")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "count_star(),count(DISTINCT env_id)\n6,6\n", r.stdout)
	cached, err := filepath.Glob(filepath.Join(cache, "spade", "*.parquet"))
	require.NoError(t, err)
	require.NotEmpty(t, cached)
	before := map[string][]byte{}
	for _, p := range cached {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		before[p] = b
	}
	outside := t.TempDir()
	for _, a := range sqlAttacks(cached[0], outside) {
		if strings.Contains(a.query, "runs/default") {
			continue // a local store's directory: there is none here
		}
		r := run("sql", a.query)
		require.Equal(t, exitUsage, r.code, "%s\nstdout:\n%s\nstderr:\n%s", a.query, r.stdout, r.stderr)
		require.Contains(t, r.stderr, a.want, a.query)
	}
	for p, b := range before {
		got, err := os.ReadFile(p)
		require.NoError(t, err)
		require.Equal(t, b, got, "cached file %s is unchanged", p)
	}
	left, err := os.ReadDir(outside)
	require.NoError(t, err)
	require.Empty(t, left)
}

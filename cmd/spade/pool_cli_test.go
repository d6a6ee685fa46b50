package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/report"
	"github.com/spade-pipeline/spade/pipeline"
)

// writeFixedPool writes a small pool directory under dir/pool from the
// examples of docs/examples: the guess game in a subdirectory, three
// variants of it (other ranges, other names), the bank tool-use
// environment, a program that does not compile and a byte-for-byte copy
// of a variant. It returns the directory and the sources of the valid
// ones by id.
func writeFixedPool(t *testing.T, dir string) (string, map[string]string) {
	t.Helper()
	guess, err := os.ReadFile("../../docs/examples/guess_game.py")
	require.NoError(t, err)
	bank, err := os.ReadFile("../../docs/examples/bank_tooluse.py")
	require.NoError(t, err)
	root := filepath.Join(dir, "pool")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "deduction"), 0o755))
	valid := map[string]string{
		"deduction/guess_game.py": string(guess),
		"bank_tooluse.py":         string(bank),
	}
	for _, hi := range []string{"8", "24", "32"} {
		v := strings.Replace(string(guess), "LOW, HIGH = 1, 16", "LOW, HIGH = 1, "+hi, 1)
		v = strings.Replace(v, `name = "guess_game"`, `name = "guess_game_`+hi+`"`, 1)
		require.NotEqual(t, string(guess), v)
		valid["guess_"+hi+".py"] = v
	}
	for id, src := range valid {
		require.NoError(t, os.WriteFile(filepath.Join(root, id), []byte(src), 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(root, "broken.py"), []byte("class Broken(:\n    pass\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "guess_32_copy.py"), []byte(valid["guess_32.py"]), 0o644))
	return root, valid
}

// csvBody is `spade sql --format csv` output without its header line.
func csvBody(out string) string {
	_, body, _ := strings.Cut(strings.TrimSpace(out), "\n")
	return body
}

// manifestFiles returns the sha256 of each file table t of round 0 lists.
func manifestFiles(t *testing.T, runs, run, table string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(runs, run, "round=000000", table, "_manifest.json"))
	require.NoError(t, err)
	var m pipeline.Manifest
	require.NoError(t, json.Unmarshal(b, &m))
	var out []string
	for _, f := range m.Files {
		out = append(out, f.SHA256)
	}
	require.NotEmpty(t, out, "%s/%s", run, table)
	return out
}

// TestPoolImportFixedPoolCLI imports a small fixed pool through the CLI
// (`spade pool import`) into a run of configs/baseline-fixed-pool.yaml,
// shrunk by SPADE_* variables to 2 environments per round and 4 plays,
// and runs rounds 1..5 offline on the procedural backend: the import
// records the invalid environment with its reason and lists the
// duplicate; importing again does nothing; no round designs, validates or
// hints anything (no designs, slots, hints or design/hint calls tables,
// no designer sample), every play and training sample is of a pool
// environment, each round plays 2 of them, and the first epoch (rounds 1
// and 2) plays 4 different ones. The same environments from a Parquet
// file and a JSONL file get the same env_ids, the same import into
// another store gives byte-identical Parquet, bad input fails naming the
// file, row and field with nothing committed, and round 1 (or round 0
// stage by stage) without an import is refused; the Airflow DAG of the
// config has no generation task; spade diff against default.yaml names
// exactly the recipe and design.mode.
func TestPoolImportFixedPoolCLI(t *testing.T) {
	dir := t.TempDir()
	root, valid := writeFixedPool(t, dir)
	cfg, err := filepath.Abs("../../configs/baseline-fixed-pool.yaml")
	require.NoError(t, err)
	shrink := []string{"SPADE_SAMPLE_SLOTS=2", "SPADE_ROLLOUT_GROUP_SIZE=4", "SPADE_ROLLOUT_ENVS_PER_PART=2", "SPADE_WORKERS=2"}
	run := func(env []string, args ...string) result {
		t.Helper()
		return spade(t, dir, append(append([]string{}, shrink...), env...), append([]string{"--config", cfg}, args...)...)
	}
	sql := func(q string) string {
		t.Helper()
		res := run(nil, "--run", "fixed", "sql", "--format", "csv", q)
		require.Equal(t, 0, res.code, "%s: %s", q, res.stderr)
		return csvBody(res.stdout)
	}

	// Round 1 before any import: refused, nothing created.
	res := run(nil, "--run", "fixed", "round", "1")
	require.Equal(t, 2, res.code, res.stderr)
	require.Contains(t, res.stderr, "run fixed has design.mode fixed_pool and no imported pool")
	require.NoDirExists(t, filepath.Join(dir, "runs", "fixed"))
	// Nor can round 0 be committed stage by stage (an Airflow DAG's
	// round-0 task) without the pool; the DAG has no generation task.
	res = run(nil, "--run", "fixed", "stage", "corpus", "--round", "0")
	require.Equal(t, 1, res.code, res.stderr)
	require.Contains(t, res.stderr, "design.mode fixed_pool: round 0 is committed by `spade pool import PATH...`")
	require.NoDirExists(t, filepath.Join(dir, "runs", "fixed"))
	dag := filepath.Join(dir, "dag.py")
	res = run(nil, "dag", "airflow", "--out", dag)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "7 stages, 1 sharded")
	src := mustRead(t, dag)
	require.Contains(t, src, "stage rollout --round")
	require.NotContains(t, src, "stage design --round")

	res = run(nil, "--run", "fixed", "pool", "import", "--json", root)
	require.Equal(t, 0, res.code, res.stderr)
	var rep struct {
		AlreadyImported bool `json:"already_imported"`
		Environments    int  `json:"environments"`
		Valid           int  `json:"valid"`
		Invalid         []struct {
			ID, Reason string
		} `json:"invalid"`
		Duplicates []string `json:"duplicates"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &rep), res.stdout)
	require.False(t, rep.AlreadyImported)
	require.Equal(t, 6, rep.Environments)
	require.Equal(t, 5, rep.Valid)
	require.Len(t, rep.Invalid, 1)
	require.Equal(t, "broken.py", rep.Invalid[0].ID)
	require.Equal(t, "compile", rep.Invalid[0].Reason)
	require.Len(t, rep.Duplicates, 1)
	require.Contains(t, rep.Duplicates[0], "guess_32_copy.py: same source as guess_32.py")

	res = run(nil, "--run", "fixed", "pool", "import", root)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "pool of run fixed already imported (6 environments, 5 valid); nothing to do")

	for r := 1; r <= 5; r++ {
		n := string(rune('0' + r))
		res := run(nil, "--run", "fixed", "round", n)
		require.Equal(t, 0, res.code, "round %s: %s", n, res.stderr)
		require.Contains(t, res.stdout, "round "+n+" of run fixed committed")
		require.Contains(t, res.stdout, "pool round (fixed pool: design.mode = fixed_pool, no regeneration)")
	}
	fixedPoolReport(t, dir, run)

	// The designer (and the hint writer) never ran: no table of theirs in
	// any round, no validation after round 0, no designer sample.
	for _, table := range []string{"slots", "designs", "design_calls", "hints", "hint_calls"} {
		got, err := filepath.Glob(filepath.Join(dir, "runs", "fixed", "round=*", table))
		require.NoError(t, err)
		require.Empty(t, got, "table %s was written", table)
	}
	got, err := filepath.Glob(filepath.Join(dir, "runs", "fixed", "round=00000[1-9]", "validations"))
	require.NoError(t, err)
	require.Empty(t, got)
	require.Equal(t, "agent,40", sql("select role, count(*) n from train_batch group by role"))

	// Round 0: the environments (valid or not), their checks, the pool of
	// the valid ones.
	require.Equal(t, "6,5,1", sql("select count(*), count(*) filter (where valid), count(*) filter (where reason = 'compile') from environments where round = 0"))
	require.Equal(t, "5", sql("select count(*) from pool where round = 0"))
	ids := sql("select string_agg(slot_id, ' ' order by slot_id) from pool where round = 0")
	require.Equal(t, "bank_tooluse.py deduction/guess_game.py guess_24.py guess_32.py guess_8.py", ids)
	require.Equal(t, "tool_use,1\ngame,4", sql("select setting, count(*) from pool where round = 0 group by setting order by setting desc"))
	require.Equal(t, "0", sql("select count(distinct env_id) - 6 from validations where round = 0"))

	// Every round carries the pool forward and plays 2 of its
	// environments; rounds 1 and 2 (one epoch of floor(5 / 2) rounds)
	// play 4 different ones; every play and sample is of the pool.
	require.Equal(t, "0,5\n1,5\n2,5\n3,5\n4,5\n5,5", sql("select round, count(*) from pool group by round order by round"))
	require.Equal(t, "1,2,8\n2,2,8\n3,2,8\n4,2,8\n5,2,8", sql("select round, count(distinct env_id), count(*) from rollouts group by round order by round"))
	require.Equal(t, "4", sql("select count(distinct env_id) from rollouts where round in (1, 2)"))
	require.Equal(t, "0", sql("select count(*) from rollouts where env_id not in (select env_id from pool where round = 0)"))
	require.Equal(t, "0", sql("select count(*) from rollouts where hinted"))
	require.Equal(t, "1,2\n2,2\n3,2\n4,2\n5,2", sql("select round, count(*) from labels group by round order by round"))
	require.Equal(t, "0", sql("select count(*) from labels l where not exists (select 1 from rollouts r where r.round = l.round and r.env_id = l.env_id)"))

	// spade diff against the default recipe, shrunk alike, names exactly
	// the baseline's switches before the tables.
	def, err := filepath.Abs("../../configs/default.yaml")
	require.NoError(t, err)
	res = spade(t, dir, shrink, "--config", def, "--run", "designed", "round", "1")
	require.Equal(t, 0, res.code, res.stderr)
	res = run(nil, "diff", "designed", "fixed", "--round", "1", "--table", "labels", "--json")
	require.Equal(t, 1, res.code, res.stderr)
	var d struct {
		Config []struct {
			Key string `json:"key"`
		} `json:"config"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &d), res.stdout)
	var keys []string
	for _, c := range d.Config {
		keys = append(keys, c.Key)
	}
	require.Equal(t, []string{"recipe", "design.mode"}, keys, "spade diff designed fixed")
	res = run(nil, "diff", "designed", "fixed", "--round", "1", "--table", "labels")
	require.Equal(t, 1, res.code, res.stderr)
	require.Contains(t, res.stdout, `config design.mode: "designer" -> "fixed_pool"`)

	// The same environments from Parquet and JSONL rows: the same env_ids;
	// the skill column is kept.
	type row struct {
		ID     string `parquet:"id"`
		Source string `parquet:"source"`
		Skill  string `parquet:"skill"`
		Extra  int64  `parquet:"extra"`
	}
	var rows []row
	var jsonl bytes.Buffer
	for _, id := range []string{"bank_tooluse.py", "guess_8.py"} {
		rows = append(rows, row{ID: id, Source: valid[id], Skill: "from_column"})
		b, err := json.Marshal(map[string]any{"id": id, "source": valid[id]})
		require.NoError(t, err)
		jsonl.Write(append(b, '\n'))
	}
	pq := filepath.Join(dir, "pool.parquet")
	require.NoError(t, parquet.WriteFile(pq, rows))
	jl := filepath.Join(dir, "pool.jsonl")
	require.NoError(t, os.WriteFile(jl, jsonl.Bytes(), 0o644))
	res = run(nil, "--run", "fromparquet", "pool", "import", pq, jl)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "imported 2 environments into run fromparquet: 2 valid (the pool), 0 invalid, 2 duplicates left out (read 4 from 2 files)")
	res = run(nil, "--run", "fromparquet", "sql", "--format", "csv", "select string_agg(env_id || ' ' || skill, ',' order by env_id) from pool")
	require.Equal(t, 0, res.code, res.stderr)
	want := sql("select string_agg(env_id || ' from_column', ',' order by env_id) from pool where round = 0 and slot_id in ('bank_tooluse.py', 'guess_8.py')")
	require.Equal(t, want, csvBody(res.stdout))

	// The same import into another store: byte-identical Parquet.
	other := filepath.Join(dir, "other")
	res = spade(t, dir, shrink, "--config", cfg, "--store", "file://"+other, "--run", "fixed", "pool", "import", root)
	require.Equal(t, 0, res.code, res.stderr)
	for _, table := range []string{"validations", "environments", "pool"} {
		require.Equal(t, manifestFiles(t, filepath.Join(dir, "runs"), "fixed", table), manifestFiles(t, other, "fixed", table), table)
	}

	// Bad input: the file, row and field are named; nothing is committed.
	bad := filepath.Join(dir, "bad.jsonl")
	require.NoError(t, os.WriteFile(bad, []byte(`{"id": "a", "source": "print(1)"}`+"\n"+`{"id": "b", "code": "print(2)"}`+"\n"), 0o644))
	res = run(nil, "--run", "bad", "pool", "import", bad)
	require.Equal(t, 1, res.code, res.stderr)
	require.Contains(t, res.stderr, "bad.jsonl row 2: field source: bad pool input: missing")
	require.NoDirExists(t, filepath.Join(dir, "runs", "bad"))
	require.NoError(t, os.WriteFile(bad, []byte(`{"id": "a", "source": 7}`+"\n"), 0o644))
	res = run(nil, "--run", "bad", "pool", "import", bad)
	require.Equal(t, 1, res.code, res.stderr)
	require.Contains(t, res.stderr, "bad.jsonl row 1: field source: bad pool input: want a string, got a number")
	require.NoError(t, os.WriteFile(bad, []byte(`{"id": "a", "source": "print(1)"}`+"\n\n"+`{"id": "a", "source": "print(2)"}`+"\n"), 0o644))
	res = run(nil, "--run", "bad", "pool", "import", bad)
	require.Equal(t, 1, res.code, res.stderr)
	require.Contains(t, res.stderr, "bad.jsonl row 3: field id: bad pool input: id \"a\" is also the id of "+bad+" row 1, whose source differs")
	require.NoDirExists(t, filepath.Join(dir, "runs", "bad"))

	// A run of the default design mode refuses a pool.
	res = spade(t, dir, nil, "--run", "designed", "pool", "import", root)
	require.Equal(t, 2, res.code, res.stderr)
	require.Contains(t, res.stderr, "design.mode designer")
	// A run whose round 0 is sealed without this pool: a conflict.
	res = run(nil, "--run", "fromparquet", "pool", "import", root)
	require.Equal(t, 3, res.code, res.stderr)
	require.Contains(t, res.stderr, "round 0 of run fromparquet is already sealed without this pool")
}

// fixedPoolReport is TestPoolImportFixedPoolCLI's check of `spade report`
// on the fixed-pool run's five rounds (trainer none, the procedural
// model): the header says that no round regenerates and why, never
// "every k rounds"; the reply plots have data from the rollouts table;
// the training plots whose metrics no trainer step wrote, the token
// lengths (no token ids) and on_policy (no served call) say "no data",
// and the zero-variance groups, written by the grpo stage, are drawn.
func fixedPoolReport(t *testing.T, dir string, run func(env []string, args ...string) result) {
	out := filepath.Join(dir, "fixed-report.html")
	res := run(nil, "--run", "fixed", "report", "--out", out)
	require.Equal(t, 0, res.code, res.stderr)
	page := mustRead(t, out)
	i := strings.Index(page, `<p class="meta" id="rounds-text">`)
	require.GreaterOrEqual(t, i, 0, "no opening sentence")
	text := page[i : i+strings.Index(page[i:], "</p>")]
	require.Contains(t, text, "5 rounds (1 to 5), none with regeneration: under design.mode fixed_pool no round designs environments; every round plays the pool imported at round 0")
	require.NotContains(t, text, "every 4 rounds")
	require.NotContains(t, text, "dashed vertical lines")
	require.False(t, strings.Contains(page, `class="regen"`), "a fixed-pool run marks regeneration rounds")
	require.Equal(t, report.PlotCount, strings.Count(page, "<svg "))
	plot := func(id string) string {
		i := strings.Index(page, `<svg xmlns="http://www.w3.org/2000/svg" id="`+id+`"`)
		require.GreaterOrEqual(t, i, 0, "no plot %s", id)
		return page[i : i+strings.Index(page[i:], "</svg>")]
	}
	for _, id := range []string{"loss", "grad-norm", "clip", "kl", "trained-tokens", "mismatch", "reply-tokens", "on-policy"} {
		require.Contains(t, plot(id), `class="no-data"`, "plot %s", id)
	}
	for id, series := range map[string]string{"reply-chars": "mean", "cut": "stepped replies without an action", "zero-variance": "zero_variance_groups / agent_groups"} {
		require.Equal(t, 5, strings.Count(plot(id), `class="marker" data-series="`+series+`"`), "plot %s: a marker per round", id)
	}
	require.Contains(t, page, "<tr><td>1</td><td>no</td><td>0</td><td>–</td>", "round 1 of trainer none: not trained, no step metric")
	require.Contains(t, page, `<h2 id="doc-report-enginesreport">`, "docs/metrics.md rendered as HTML")
}

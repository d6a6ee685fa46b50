package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/internal/pyenv"
	"github.com/spade-pipeline/spade/pipeline"
)

// TestDagAirflowReal runs both DAG files `spade dag airflow` writes through
// a real Airflow 3 (the pinned requirements-airflow.txt environment, `make
// airflow-venv`), with a fresh SQLite metadata database in a temporary
// AIRFLOW_HOME. testdata/airflow_real/drive.py parses the dags folder with
// Airflow's DagBag (no import error, no deprecated import path), then asks
// the scheduled DAG's cron timetable for its next DAG run twice, as the
// scheduler does with catchup off, and runs each with DAG.test, the
// in-process runner of `airflow dags test`. The first DAG run must do
// round 1 (and seal round 0), the second round 2: each does the next
// unsealed round, through `spade round next` and its lease. The manual
// DAG's task graph as Airflow built it must equal the stage DAG. Slow
// (Airflow's start-up and database migration take most of a minute), so
// it runs only where the environment exists and not under -short.
func TestDagAirflowReal(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a real Airflow takes about a minute")
	}
	py := pyenv.RequireAirflow(t)
	o := newOpsEnv(t)
	home := filepath.Join(o.dir, "airflow")
	dags := filepath.Join(home, "dags")
	require.NoError(t, os.MkdirAll(dags, 0o755))
	o.must(t, nil, "dag", "airflow", "--schedule", "@daily", "--dag-id", "spade_next", "--spade", spadeBin, "--out", filepath.Join(dags, "spade_next.py"))
	o.must(t, nil, "dag", "airflow", "--spade", spadeBin, "--shards", "2", "--out", filepath.Join(dags, "spade_round.py"))

	env := append(os.Environ(), "AIRFLOW_HOME="+home, "AIRFLOW__CORE__DAGS_FOLDER="+dags,
		"AIRFLOW__CORE__LOAD_EXAMPLES=False", "AIRFLOW__CORE__UNIT_TEST_MODE=False",
		"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=sqlite:///"+filepath.Join(home, "airflow.db"))
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(py, args...)
		cmd.Dir, cmd.Env = o.dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			tail := string(out)
			if len(tail) > 6000 {
				tail = tail[len(tail)-6000:]
			}
			t.Fatalf("%s %v: %v\n%s", py, args, err, tail)
		}
	}
	run("-m", "airflow", "db", "migrate")
	driver, err := filepath.Abs("testdata/airflow_real/drive.py")
	require.NoError(t, err)
	results := filepath.Join(o.dir, "drive.jsonl")
	run(driver, dags, "spade_next", "spade_round", "2", results)

	f, err := os.Open(results)
	require.NoError(t, err)
	defer f.Close()
	var lines []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		lines = append(lines, m)
	}
	require.Len(t, lines, 4, "two DAGs parsed, two DAG runs")

	sched, manual := lines[0], lines[1]
	require.Equal(t, "spade_next", sched["dag"])
	require.Equal(t, "0 0 * * *", sched["schedule"], "@daily as Airflow's cron timetable reads it")
	require.Equal(t, false, sched["catchup"])
	require.EqualValues(t, 1, sched["max_active_runs"])
	require.Equal(t, map[string]any{"round_next": []any{}}, sched["tasks"])

	// The manual DAG as Airflow built it: the stage edges of TestDagAirflow.
	require.Equal(t, "spade_round", manual["dag"])
	require.Equal(t, []any{"round", "shards"}, manual["params"])
	tasks := manual["tasks"].(map[string]any)
	up := func(task string) []string {
		var s []string
		for _, u := range tasks[task].([]any) {
			s = append(s, u.(string))
		}
		return s
	}
	require.Equal(t, []string{"corpus"}, up("round0_seal"))
	require.Equal(t, []string{"design_shards"}, up("design"))
	require.Equal(t, []string{"rollout"}, up("rollout_commit"))
	require.Contains(t, up("seal"), "metrics")
	require.Contains(t, up("grpo"), "label")
	require.Len(t, tasks, 19)

	// Each scheduled DAG run did the next unsealed round.
	for i, l := range lines[2:] {
		require.Equal(t, "success", l["state"], "DAG run %d", i)
		require.Equal(t, map[string]any{"round_next": "success"}, l["tasks"], "DAG run %d", i)
	}
	require.NotEqual(t, lines[2]["logical_date"], lines[3]["logical_date"], "two schedule intervals")
	st := openStore(t, o.store)
	for r := 0; r <= 2; r++ {
		_, err := pipeline.ReadSeal(context.Background(), st, "default", r)
		require.NoError(t, err, "round %d sealed", r)
	}
	_, err = pipeline.ReadSeal(context.Background(), st, "default", 3)
	require.ErrorIs(t, err, pipeline.ErrNotCommitted, "round 3 not run")
}

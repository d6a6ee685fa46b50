package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// dagTaskRun is one line of testdata/airflow_stub/run_tasks.py: how one
// task of the generated DAG ended when the fake spade exited with the
// given codes.
type dagTaskRun struct {
	Task    string   `json:"task"`
	Mapped  bool     `json:"mapped"`
	Retries int      `json:"retries"`
	RunsAt  int      `json:"runs_at"`
	Exit    int      `json:"exit"`
	State   string   `json:"state"`
	Tries   int      `json:"tries"`
	Calls   []string `json:"calls"`
}

// TestDagAirflowExitCodes imports the DAG that `spade dag airflow` writes
// into Debian's python3 with a stand-in airflow package (Airflow is not
// installed here; testdata/airflow_stub mirrors BashOperator's execute and
// the task runner's handling of AirflowSkipException, AirflowFailException
// and AirflowException) and runs every task, mapped ones included, with a
// fake spade exiting with each code. Exit 0 succeeds; 99 from `spade dag
// runs-at` skips; 2 (usage) and 3 (conflict) fail at the first try, since a
// retry fails the same way (they used to be retried --retries times, 300 s
// apart); 1 and 130 are retried until the retries are used up.
func TestDagAirflowExitCodes(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	o := newOpsEnv(t)
	fake := filepath.Join(o.dir, "fake spade")
	require.NoError(t, os.WriteFile(fake, []byte(`#!/bin/sh
echo "$*" >> "$FAKE_LOG"
if [ "$1" = dag ]; then exit "$FAKE_RUNS_AT"; fi
exit "$FAKE_EXIT"
`), 0o755))
	file := filepath.Join(o.dir, "spade_round.py")
	o.must(t, nil, "dag", "airflow", "--out", file, "--shards", "2", "--retries", "2", "--spade", fake)

	scenarios := []string{"0:0", "0:1", "0:2", "0:3", "0:130", "99:0", "0:99", "2:0", "3:0", "1:0"}
	stub, err := filepath.Abs("testdata/airflow_stub/run_tasks.py")
	require.NoError(t, err)
	cmd := exec.Command("/usr/bin/python3", append([]string{"-B", stub, file, "3"}, scenarios...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "run_tasks.py: %s", stderr.String())

	seen := map[string]bool{}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r dagTaskRun
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), sc.Text())
		n++
		seen[r.Task] = true
		what := fmt.Sprintf("task %s, runs-at exit %d, spade exit %d: %+v", r.Task, r.RunsAt, r.Exit, r)
		require.Equal(t, 2, r.Retries, what)
		// Tasks of the round-0 setup and the seal run at every round
		// and call no runs-at.
		checked := !strings.Contains(r.Task, "seal") && r.Task != "corpus"
		code := r.Exit
		if checked && r.RunsAt != 0 {
			code = r.RunsAt
		}
		want, tries := "", 1
		switch code {
		case 0:
			want = "success"
		case exitSkip:
			want = "skipped"
		case exitUsage, exitConflict:
			want = "failed"
		default:
			want, tries = "failed", 3
		}
		require.Equal(t, want, r.State, what)
		require.Equal(t, tries, r.Tries, what)
		calls := 1
		if checked {
			calls = 2
			if r.RunsAt != 0 {
				calls = 1
			}
		}
		require.Len(t, r.Calls, calls*tries, "the command ran once per try: %s", what)
		if r.Mapped && code == 0 {
			require.Contains(t, r.Calls[len(r.Calls)-1], "--round 3 --shard 0/2", what)
		}
	}
	require.NoError(t, sc.Err())
	for _, task := range []string{"corpus", "round0_seal", "sample", "design", "design_commit", "validate", "hint", "rollout", "rollout_commit", "metrics", "seal"} {
		require.True(t, seen[task], "task %s was not run", task)
	}
	require.Equal(t, len(seen)*len(scenarios), n)
}

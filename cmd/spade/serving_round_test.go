package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/model/modeltest"
)

// fakeServeEnv, set in its environment, turns this package's test binary
// into a model server (TestMain calls fakeServe): an OpenAI-compatible
// server with the real wire format (modeltest) that a managed
// serve_command can start, as it would vLLM, and that appends its pid to
// the file the variable names when it starts, so that tests count the
// server processes, not only spade's log lines.
const fakeServeEnv = "SPADE_TEST_FAKE_SERVE"

// fakeLatencyEnv is the fake server's answer latency (a Go duration;
// none when unset).
const fakeLatencyEnv = "SPADE_TEST_FAKE_SERVE_LATENCY"

// fakeServe runs the fake model server of fakeServeEnv: args are the
// checkpoint directory (which must exist; nothing is read from it), the
// port and the served model name. It serves until SIGTERM or SIGINT and
// returns the exit code.
func fakeServe(args []string) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "fake serve: want CHECKPOINT PORT SERVED_MODEL")
		return 2
	}
	if _, err := os.Stat(args[0]); err != nil {
		fmt.Fprintln(os.Stderr, "fake serve:", err)
		return 1
	}
	args = args[1:]
	f, err := os.OpenFile(os.Getenv(fakeServeEnv), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err == nil {
		_, err = fmt.Fprintln(f, os.Getpid())
		f.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake serve:", err)
		return 1
	}
	opts := []modeltest.Option{modeltest.WithAddr("127.0.0.1:" + args[0]), modeltest.WithModel(args[1]), modeltest.WithoutRecording()}
	if d, err := time.ParseDuration(os.Getenv(fakeLatencyEnv)); err == nil {
		opts = append(opts, modeltest.WithLatency(d))
	}
	srv, err := modeltest.New(opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake serve:", err)
		return 1
	}
	fmt.Println("fake serve: serving", args[1], "at", srv.URL)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	srv.Close()
	return 0
}

// fakeServeCommand is the model.serve_command of the fake server: this
// test binary under env(1), recording its starts in starts, answering
// after latency (0: at once).
func fakeServeCommand(t *testing.T, starts string, latency time.Duration) []string {
	self, err := os.Executable()
	require.NoError(t, err)
	return []string{"env", fakeServeEnv + "=" + starts, fakeLatencyEnv + "=" + latency.String(), self, "{checkpoint}", "{port}", "{served_model}"}
}

// fakeModelYAML is the model.* block that serves every role (openai,
// one managed serving setting) by the fake server of fakeServeCommand.
func fakeModelYAML(t *testing.T, starts string, latency time.Duration) string {
	return fmt.Sprintf(`model:
  backend: openai
  name: policy
  serving: managed
  serve_command: %s
  serve_ready_timeout_s: 60
  checkpoint_cache: %s
  max_retries: 0
`, yamlList(fakeServeCommand(t, starts, latency)), filepath.Join(t.TempDir(), "cache"))
}

// serverPids returns the pids the fake servers wrote to starts.
func serverPids(t *testing.T, starts string) []int {
	b, err := os.ReadFile(starts)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	require.NoError(t, err)
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	return pids
}

// TestServingOneServerPerRound is issue 42's first check: in a
// regeneration round where design, hint and rollout are all served by the
// managed policy server (every role openai, one serving setting), `spade
// round` starts one server and the three stages share it; the same
// stages run one by one with `spade stage` start one each (three). The
// shared server is stopped before the trainer runs (a command trainer
// checks that no server process is left), so round 2 is served by the
// checkpoint round 1 trained. Every call names the checkpoint that
// answered, both rounds are on-policy, and no server outlives the spade
// process that started it.
func TestServingOneServerPerRound(t *testing.T) {
	dir := t.TempDir()
	base := fakeCheckpoint(t)
	starts := filepath.Join(t.TempDir(), "starts")
	// The trainer (grpo.trainer command) writes a checkpoint and notes
	// every fake server still running while it trains.
	alive := filepath.Join(t.TempDir(), "alive")
	trainer := filepath.Join(t.TempDir(), "trainer.sh")
	require.NoError(t, os.WriteFile(trainer, []byte(fmt.Sprintf(`mkdir -p "$6" && echo '{"model_type":"llama"}' > "$6/config.json" && printf 'w' > "$6/model.safetensors"
for pid in $(cat %[1]q 2>/dev/null); do if [ -d /proc/$pid ]; then echo $pid >> %[2]q; fi; done
echo '{"step":1,"loss":0.5}' > "${10}"
`, starts, alive)), 0o755))
	cfg := writeConfig(t, dir, fmt.Sprintf(`seed: 3
workers: 2
regenerate_every: 1
sample: {slots: 2}
design: {slots_per_part: 2}
rollout: {group_size: 1, max_turns: 2, envs_per_part: 2}
label: {band_low: 0, band_high: 1}
%sgrpo: {trainer: command, command: [/bin/sh, %q], base_checkpoint: %s}
`, fakeModelYAML(t, starts, 0), trainer, base))
	gone := func(pids []int) {
		t.Helper()
		for _, pid := range pids {
			require.Eventually(t, func() bool { return errors.Is(syscall.Kill(-pid, 0), syscall.ESRCH) }, 15*time.Second, 50*time.Millisecond,
				"server %d outlives spade", pid)
		}
	}

	start := time.Now()
	r := spade(t, dir, nil, "--config", cfg, "--log-level", "info", "round", "1")
	require.Equal(t, 0, r.code, r.stderr)
	t.Logf("round 1 under spade round: %v", time.Since(start))
	require.Equal(t, 1, strings.Count(r.stderr, "model server started"), r.stderr)
	require.Equal(t, 2, strings.Count(r.stderr, "model server reused"), "hint and rollout reuse design's server: %s", r.stderr)
	require.Len(t, serverPids(t, starts), 1, "one server process")
	gone(serverPids(t, starts))
	require.NoFileExists(t, alive, "the server was stopped before the trainer ran")
	require.Contains(t, r.stderr, "the trainer takes the accelerator")
	require.Equal(t, "1", sqlCSV(t, dir, cfg, "select value::int from train_metrics where round = 1 and name = 'trained'"))
	ck1 := sqlCSV(t, dir, cfg, "select checkpoint_id from checkpoints where round = 1")
	require.Regexp(t, `^[0-9a-f]{16}$`, ck1, "round 1 trained a checkpoint")

	id := "base:" + base
	for _, table := range []string{"design_calls", "hint_calls", "rollout_calls"} {
		require.Equal(t, id, sqlCSV(t, dir, cfg, "select string_agg(distinct checkpoint_id, ',') from "+table+" where round = 1"), table)
		require.Equal(t, "0", sqlCSV(t, dir, cfg, "select count(*) from "+table+" where round = 1 and error <> ''"), table)
	}
	require.Equal(t, "1", sqlCSV(t, dir, cfg, "select value from metrics where round = 1 and name = 'on_policy'"))
	require.NotEqual(t, "0", sqlCSV(t, dir, cfg, "select value from metrics where round = 1 and name = 'policy_calls'"))

	// The same stages of round 2, one process each: a server each.
	for _, stage := range []string{"sample", "design", "validate", "hint", "rollout"} {
		r := spade(t, dir, nil, "--config", cfg, "--log-level", "info", "stage", stage, "--round", "2")
		require.Equal(t, 0, r.code, "stage %s: %s", stage, r.stderr)
	}
	require.Len(t, serverPids(t, starts), 1+3, "spade stage design, hint and rollout start a server each")
	gone(serverPids(t, starts))
	// The rest of the round calls no model.
	r = spade(t, dir, nil, "--config", cfg, "--log-level", "info", "round", "2")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, 0, strings.Count(r.stderr, "model server started"), r.stderr)
	require.NoFileExists(t, alive)
	for _, table := range []string{"design_calls", "hint_calls", "rollout_calls"} {
		require.Equal(t, ck1, sqlCSV(t, dir, cfg, "select string_agg(distinct checkpoint_id, ',') from "+table+" where round = 2"), table)
	}
	require.Equal(t, "1", sqlCSV(t, dir, cfg, "select value from metrics where round = 2 and name = 'on_policy'"))
}

// TestServingSharedServerKill: SIGKILL of spade round while the server it
// shares between stages serves the rollout stage (started for design,
// reused by hint and rollout) leaves no server process; the rerun resumes
// (design and hint stay committed), starts one server for what is left
// and commits an on-policy round.
func TestServingSharedServerKill(t *testing.T) {
	dir := t.TempDir()
	base := fakeCheckpoint(t)
	starts := filepath.Join(t.TempDir(), "starts")
	cfg := writeConfig(t, dir, fmt.Sprintf(`seed: 3
workers: 1
sample: {slots: 2}
design: {slots_per_part: 1}
rollout: {group_size: 2, max_turns: 4, envs_per_part: 1}
%sgrpo: {base_checkpoint: %s}
`, fakeModelYAML(t, starts, 100*time.Millisecond), base))
	cmd := exec.Command(spadeBin, "--config", cfg, "--log-level", "info", "round", "1")
	cmd.Dir = dir
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	var seen []string
	killed := false
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		seen = append(seen, sc.Text())
		if strings.Contains(sc.Text(), "model server reused") && strings.Contains(sc.Text(), "stage=rollout") {
			require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			killed = true
			break
		}
	}
	go io.Copy(io.Discard, stderr)
	_ = cmd.Wait()
	require.True(t, killed, "rollout never reused the server: %s", strings.Join(seen, "\n"))
	log := strings.Join(seen, "\n")
	require.Equal(t, 1, strings.Count(log, "model server started"), log)
	pids := serverPids(t, starts)
	require.Len(t, pids, 1)
	require.Eventually(t, func() bool { return errors.Is(syscall.Kill(-pids[0], 0), syscall.ESRCH) }, 15*time.Second, 50*time.Millisecond,
		"no process of the shared server's group outlives spade")

	r := spade(t, dir, nil, "--config", cfg, "--log-level", "info", "round", "1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `ran \[[^]]*rollout[^]]*\], already committed \[[^]]*design[^]]*hint[^]]*\]`, r.stdout, "the rerun resumes")
	require.Equal(t, 1, strings.Count(r.stderr, "model server started"), r.stderr)
	require.Len(t, serverPids(t, starts), 2)
	id := "base:" + base
	for _, table := range []string{"design_calls", "hint_calls", "rollout_calls"} {
		require.Equal(t, id, sqlCSV(t, dir, cfg, "select string_agg(distinct checkpoint_id, ',') from "+table), table)
	}
	require.Equal(t, "0", sqlCSV(t, dir, cfg, "select count(*) from rollout_calls where error <> ''"))
	require.Equal(t, "1", sqlCSV(t, dir, cfg, "select value from metrics where name = 'on_policy'"))
}

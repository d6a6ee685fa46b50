package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/model/modeltest"
	"github.com/spade-pipeline/spade/pipeline"
)

// sideTrainer is a grpo.command trainer that writes a servable-looking
// checkpoint of two files and one step of metrics.
const sideTrainer = `#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in --output) out="$2"; shift;; --metrics) m="$2"; shift;; esac; shift; done
mkdir -p "$out/sub" && printf 'weights' > "$out/model.safetensors" && printf '{}' > "$out/config.json" && printf x > "$out/sub/extra.bin"
[ -n "$m" ] && echo '{"step": 0, "loss": 0.5, "kl": 0, "clip_fraction": 0, "grad_norm": 1, "tokens": 10, "trained_tokens": 5, "tokens_per_s": 1, "seconds": 0.1}' > "$m"
exit 0
`

// sideEvaluator stands for eval.python: --check passes; a scoring run
// touches DIR/started, waits for DIR/go, and writes one score.
const sideEvaluator = `#!/bin/sh
dir=%s
out=
while [ $# -gt 0 ]; do case "$1" in --check) exit 0;; --out) out="$2"; shift;; esac; shift; done
touch "$dir/started"
i=0
while [ ! -e "$dir/go" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
echo '{"suite": "reasoning_gym", "task": "basic_arithmetic", "metric": "accuracy", "value": 0.5, "stderr": 0.1, "n": 10}' > "$out"
`

// TestEvalLeaseAndSideFiles: spade eval holds the run's writer
// registration while it scores, so spade gc --run leaves the run alone
// (exit 4) until it is done; then spade verify checks the side files, the
// checkpoint files of the checkpoints table and the evaluation against
// its side record: intact they pass, and a damaged, missing or unrecorded
// one is named by key (exit 1 for damage), while a checkpoint file that
// gc removed by a retention rule is listed as removed, not damaged.
func TestEvalLeaseAndSideFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rounds in subprocesses")
	}
	dir := t.TempDir()
	trainer := filepath.Join(dir, "trainer.sh")
	require.NoError(t, os.WriteFile(trainer, []byte(sideTrainer), 0o755))
	evaluator := filepath.Join(dir, "evaluator.sh")
	require.NoError(t, os.WriteFile(evaluator, []byte(fmt.Sprintf(sideEvaluator, dir)), 0o755))
	srv := modeltest.Start(t, modeltest.WithModel("m"))
	cfg := writeConfig(t, dir, fmt.Sprintf(`sample: {slots: 2}
rollout: {group_size: 1, max_turns: 2}
model:
  backend: openai
  serving: fixed
  base_url: %s
  name: m
  roles:
    designer: {backend: procedural}
    hint: {backend: procedural}
grpo: {trainer: command, command: [%s]}
eval:
  python: %s
  reasoning_gym: {tasks: [basic_arithmetic]}
`, srv.URL, trainer, evaluator))
	sp := func(args ...string) result {
		t.Helper()
		return spade(t, dir, nil, append([]string{"--config", cfg, "--log-level", "warn"}, args...)...)
	}
	must := func(args ...string) string {
		t.Helper()
		r := sp(args...)
		require.Equal(t, 0, r.code, "%s", r)
		return r.stdout
	}
	must("round", "1")
	out := must("verify")
	require.Contains(t, out, "and 3 side files (", "the checkpoint's three files: %s", out)

	// eval scores while gc comes: gc refuses the run, eval goes on.
	ev := exec.Command(spadeBin, "--config", cfg, "--log-level", "warn", "eval", "--round", "1")
	ev.Dir = dir
	var evOut bytes.Buffer
	ev.Stdout, ev.Stderr = &evOut, &evOut
	require.NoError(t, ev.Start())
	done := make(chan error, 1)
	go func() { done <- ev.Wait() }()
	t.Cleanup(func() { _ = ev.Process.Kill() })
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(dir, "started")); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("spade eval ended before scoring: %v\n%s", err, evOut.String())
		case <-time.After(20 * time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "the evaluator did not start: %s", evOut.String())
	}
	regs, err := filepath.Glob(filepath.Join(dir, "runs", pipeline.WriterLeasePrefix("default")+"*.json"))
	require.NoError(t, err)
	require.Len(t, regs, 1, "spade eval is registered as a writer of the run")
	r := sp("gc", "--run", "default", "--grace", "0s")
	require.Equal(t, exitBusy, r.code, "gc of a run spade eval is scoring: %s", r)
	require.Contains(t, r.stderr, "is being written by pid", "%s", r)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o644))
	require.NoError(t, <-done, evOut.String())
	require.Contains(t, evOut.String(), "1 scores written to default/evals/round=000001/evals-")
	regs, err = filepath.Glob(filepath.Join(dir, "runs", pipeline.WriterLeasePrefix("default")+"*.json"))
	require.NoError(t, err)
	require.Empty(t, regs, "the registration is released")
	must("gc", "--run", "default", "--grace", "0s")

	side, err := filepath.Glob(filepath.Join(dir, "runs", "default", "evals", "round=000001", "evals-*.parquet"))
	require.NoError(t, err)
	require.Len(t, side, 1)
	sideKey := strings.TrimPrefix(filepath.ToSlash(side[0]), filepath.ToSlash(filepath.Join(dir, "runs"))+"/")
	require.FileExists(t, side[0]+pipeline.SideRecordSuffix)
	out = must("verify")
	require.Contains(t, out, "and 4 side files (", out)
	require.Contains(t, out, ": ok", out)
	ckpts, err := filepath.Glob(filepath.Join(dir, "runs", "default", "round=000001", "checkpoints", "files", "*", "model.safetensors"))
	require.NoError(t, err)
	require.Len(t, ckpts, 1)
	ckptKey := strings.TrimPrefix(filepath.ToSlash(ckpts[0]), filepath.ToSlash(filepath.Join(dir, "runs"))+"/")

	damaged := func(t *testing.T, names ...string) {
		t.Helper()
		r := sp("verify")
		require.Equal(t, exitFailure, r.code, "%s", r)
		for _, n := range names {
			require.Contains(t, r.stdout, n, "%s", r)
		}
		require.Contains(t, r.stderr, "damaged or missing objects", "%s", r)
	}
	for _, c := range []struct {
		name   string
		path   string
		damage func(p string)
		names  []string
	}{
		{"evaluation with a flipped byte", side[0], func(p string) {
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			b[len(b)/2] ^= 1
			require.NoError(t, os.WriteFile(p, b, 0o644))
		}, []string{"DAMAGED " + sideKey, "integrity check failed: sha256", "side record " + sideKey + pipeline.SideRecordSuffix, "repair: spade --run default --config " + cfg + " eval --round 1 --force"}},
		{"evaluation deleted", side[0], func(p string) { require.NoError(t, os.Remove(p)) }, []string{"DAMAGED " + sideKey, "file missing, but side record"}},
		{"checkpoint file with a flipped byte", ckpts[0], func(p string) { require.NoError(t, os.WriteFile(p, []byte("weightz"), 0o644)) }, []string{"DAMAGED " + ckptKey, "integrity check failed: sha256", "of default/round=000001/checkpoints/_manifest.json says"}},
		{"checkpoint file deleted", ckpts[0], func(p string) { require.NoError(t, os.Remove(p)) }, []string{"DAMAGED " + ckptKey, "file missing, but checkpoint"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			keep, err := os.ReadFile(c.path)
			require.NoError(t, err)
			defer func() { require.NoError(t, os.WriteFile(c.path, keep, 0o644)) }()
			c.damage(c.path)
			damaged(t, c.names...)
		})
	}
	out = must("verify")
	require.Contains(t, out, ": ok", "restored: %s", out)

	// A side file without its record (a build before records): listed,
	// not damage; eval's "already evaluated" says how to get one.
	rec := side[0] + pipeline.SideRecordSuffix
	keep, err := os.ReadFile(rec)
	require.NoError(t, err)
	require.NoError(t, os.Remove(rec))
	out = must("verify")
	require.Contains(t, out, "unrecorded side file "+sideKey, out)
	require.Contains(t, out, ": ok", out)
	require.Contains(t, must("eval", "--round", "1"), "it has no side record")
	require.NoError(t, os.WriteFile(rec, []byte("{not json"), 0o644))
	damaged(t, "DAMAGED "+sideKey+pipeline.SideRecordSuffix, "not a side record")
	require.NoError(t, os.WriteFile(rec, keep, 0o644))

	// A checkpoint file gc removed by a retention rule is not damage: gc
	// writes the round's removal marker before it deletes (here by hand,
	// as gc keeps the checkpoint of the last sealed round).
	marker := pipeline.CheckpointRemoval{CheckpointID: filepath.Base(filepath.Dir(ckpts[0])), Weights: true, WeightsRule: "last:1", Time: time.Now().UTC().Format(time.RFC3339), Keys: []string{ckptKey}}
	mb, err := json.Marshal(marker)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "runs", filepath.FromSlash(pipeline.RemovalKey(ckptKey))), mb, 0o644))
	require.NoError(t, os.Remove(ckpts[0]))
	out = must("verify")
	require.Contains(t, out, "removed by spade gc "+ckptKey, out)
	require.Contains(t, out, ": ok", out)
}

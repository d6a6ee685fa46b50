package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestEnvCheckInPIDNamespace runs spade env check on the guessing game
// under `unshare --pid --fork` without --mount-proc (a PID namespace
// that kept its parent's /proc, as some CI runners make): it must end
// within a few seconds, either valid or refused with an error that says
// /proc belongs to another PID namespace and suggests --mount-proc (it
// used to time out after 10 s blaming the interpreter). With
// --mount-proc it passes.
func TestEnvCheckInPIDNamespace(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare(1) is not installed")
	}
	if os.Geteuid() != 0 {
		t.Skip("unshare --pid needs root here")
	}
	run := func(extra ...string) (result, time.Duration) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		args := append(append([]string{"--pid", "--fork"}, extra...), spadeBin, "env", "check", "../../docs/examples/guess_game.py")
		cmd := exec.CommandContext(ctx, unshare, args...)
		cmd.WaitDelay = 5 * time.Second
		var so, se strings.Builder
		cmd.Stdout, cmd.Stderr = &so, &se
		start := time.Now()
		err := cmd.Run()
		took := time.Since(start)
		r := result{args: args, stdout: so.String(), stderr: se.String()}
		if ee, ok := err.(*exec.ExitError); ok {
			r.code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("unshare %v: %v", args, err)
		}
		if strings.Contains(r.stderr, "unshare failed") {
			t.Skipf("unshare is not permitted here: %s", r.stderr)
		}
		return r, took
	}
	r, took := run()
	t.Logf("without --mount-proc, %s: %s", took.Round(time.Millisecond), r)
	if took > 5*time.Second {
		t.Errorf("took %s, want a result within 5 s: %s", took, r)
	}
	switch {
	case r.code == 0 && strings.Contains(r.stdout, "PASS"):
	case r.code != 0 && strings.Contains(r.stderr, "belongs to another PID namespace") && strings.Contains(r.stderr, "--mount-proc"):
		if strings.Contains(r.stderr, "interpreter") || strings.Contains(r.stderr, "harness does not start") {
			t.Errorf("the refusal blames the interpreter: %s", r)
		}
	default:
		t.Errorf("want a pass or the /proc error: %s", r)
	}
	r, took = run("--mount-proc")
	if r.code != 0 || took > 10*time.Second {
		t.Errorf("with --mount-proc (%s): %s", took, r)
	}
}

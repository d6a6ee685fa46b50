package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// spadeBin is the spade binary built once for this package's tests
// (end-to-end tests run it as a user would: a separate process).
var spadeBin string

func TestMain(m *testing.M) {
	if os.Getenv(fakeServeEnv) != "" {
		os.Exit(fakeServe(os.Args[1:]))
	}
	dir, err := os.MkdirTemp("", "spade-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	spadeBin = filepath.Join(dir, "spade")
	build := exec.Command("go", "build", "-o", spadeBin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build spade: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is one finished spade invocation.
type result struct {
	args   []string // the command line after the binary's name
	code   int
	stdout string
	stderr string
}

// String describes r for a failing assertion: the command, its exit
// code, and what it wrote to stdout and stderr (stdout is empty when it
// went elsewhere).
func (r result) String() string {
	return fmt.Sprintf("spade %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// spade runs the binary in dir with args and extra environment variables.
func spade(t testing.TB, dir string, env []string, args ...string) result {
	t.Helper()
	var so bytes.Buffer
	r := runSpade(t, dir, env, &so, args...)
	r.stdout = so.String()
	return r
}

// spadeClosedStdout runs the binary like spade, with standard output a
// pipe whose reader has already gone (spade ... | head that has exited):
// every write to stdout fails with EPIPE.
func spadeClosedStdout(t testing.TB, dir string, env []string, args ...string) result {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	require.NoError(t, r.Close())
	defer w.Close()
	return runSpade(t, dir, env, w, args...)
}

// runSpade runs the binary in dir with stdout going to stdout and returns
// the exit code and standard error.
func runSpade(t testing.TB, dir string, env []string, stdout io.Writer, args ...string) result {
	t.Helper()
	cmd := exec.Command(spadeBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var se bytes.Buffer
	cmd.Stdout, cmd.Stderr = stdout, &se
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run spade %v: %v", args, err)
	}
	return result{args: args, code: code, stderr: se.String()}
}

// TestStdoutClosed: only a write to standard output whose reader has gone
// ends quietly; a broken pipe anywhere else (a sandbox, a storage
// connection) is a failure.
func TestStdoutClosed(t *testing.T) {
	stdout := &os.PathError{Op: "write", Path: os.Stdout.Name(), Err: syscall.EPIPE}
	require.True(t, stdoutClosed(fmt.Errorf("write rows: %w", stdout)))
	require.False(t, stdoutClosed(fmt.Errorf("stage rollout: %w", &os.PathError{Op: "write", Path: "|1", Err: syscall.EPIPE})))
	require.False(t, stdoutClosed(fmt.Errorf("put: %w", syscall.EPIPE)))
	require.False(t, stdoutClosed(&os.PathError{Op: "write", Path: os.Stdout.Name(), Err: syscall.ENOSPC}))
}

// TestGuardedPanic: a panic of a command exits 70 (internal error) with
// the panic and its stack on stderr, not Go's exit 2 for an unrecovered
// panic, which reads as a usage error and which the Airflow DAG does not
// retry.
func TestGuardedPanic(t *testing.T) {
	var buf bytes.Buffer
	require.Equal(t, exitInternal, guarded(&buf, func() int { panic("assignment to entry in nil map") }))
	require.Contains(t, buf.String(), "internal error")
	require.Contains(t, buf.String(), "assignment to entry in nil map")
	require.Contains(t, buf.String(), "goroutine ")
	require.Equal(t, exitConflict, guarded(&buf, func() int { return exitConflict }))
	require.NotContains(t, []int{exitUsage, exitConflict}, exitInternal, "a crash must not read as a code the DAG does not retry")
}

package sandbox

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeProc writes a proc tree whose self link names pid and whose
// self/status has the NSpid line nspid ("" for none).
func fakeProc(t *testing.T, pid, nspid string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
		t.Fatal(err)
	}
	status := "Name:\tspade\nPid:\t" + pid + "\n"
	if nspid != "" {
		status += "NSpid:\t" + nspid + "\n"
	}
	if err := os.WriteFile(filepath.Join(root, pid, "status"), []byte(status), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(pid, filepath.Join(root, "self")); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestProcProblem: a /proc is this namespace's when its self link names
// getpid() and NSpid lists one pid; a /proc of an ancestor namespace
// (another pid, or a second NSpid level) or none at all is named.
func TestProcProblem(t *testing.T) {
	if why := procProblem("/proc", os.Getpid()); why != "" {
		t.Fatalf("this test's own /proc: %s", why)
	}
	for _, c := range []struct {
		name, pid, nspid string
		self             int
		want             string
	}{
		{"own", "42", "42", 42, ""},
		{"own, old kernel without NSpid", "42", "", 42, ""},
		{"ancestor's, other pid", "4227", "4227\t1", 1, "names pid 4227, but this process is pid 1"},
		{"ancestor's, same number", "7", "7\t7", 7, "shows this process as pid 7, and pid 7 is its pid in its own"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := procProblem(fakeProc(t, c.pid, c.nspid), c.self)
			if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
				t.Errorf("procProblem = %q, want %q", got, c.want)
			}
			if c.want != "" && !strings.Contains(got, "belongs to another PID namespace") {
				t.Errorf("procProblem = %q, does not say what is wrong", got)
			}
		})
	}
	if got := procProblem(filepath.Join(t.TempDir(), "absent"), 1); !strings.Contains(got, "does not show this process") {
		t.Errorf("no proc file system: %q", got)
	}
}

// TestNewRefusesAForeignProc runs New in a PID namespace that kept its
// parent's /proc (unshare --pid --fork without --mount-proc, as root):
// it must fail at once with ErrForeignProc's message, naming the fix,
// instead of waiting out LoadTimeout and blaming the interpreter; with
// --mount-proc the same process starts a sandbox. The child is this test
// binary, re-run with SPADE_SANDBOX_PIDNS_CHILD set.
func TestNewRefusesAForeignProc(t *testing.T) {
	if os.Getenv("SPADE_SANDBOX_PIDNS_CHILD") != "" {
		sb, err := New(Config{Workers: 1})
		if err != nil {
			if errors.Is(err, ErrForeignProc) {
				os.Stdout.WriteString("FOREIGN " + err.Error() + "\n")
				os.Exit(0)
			}
			os.Stdout.WriteString("ERROR " + err.Error() + "\n")
			os.Exit(0)
		}
		sb.Close()
		os.Stdout.WriteString("STARTED " + string(sb.Isolation()) + "\n")
		os.Exit(0)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare(1) is not installed")
	}
	if os.Geteuid() != 0 {
		t.Skip("unshare --pid needs root here")
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	child := func(extra ...string) (string, time.Duration) {
		t.Helper()
		args := append([]string{"--pid", "--fork"}, extra...)
		args = append(args, os.Args[0], "-test.run", "^TestNewRefusesAForeignProc$")
		cmd := exec.Command(unshare, args...)
		cmd.Env = append(os.Environ(), "SPADE_SANDBOX_PIDNS_CHILD=1")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil && strings.Contains(string(out), "unshare failed") {
			t.Skipf("unshare is not permitted here: %s", out)
		}
		if err != nil {
			t.Fatalf("unshare %v: %v\n%s", extra, err, out)
		}
		return string(out), time.Since(start)
	}
	out, took := child()
	if !strings.Contains(out, "FOREIGN ") || !strings.Contains(out, "belongs to another PID namespace") || !strings.Contains(out, "--mount-proc") {
		t.Errorf("under unshare --pid --fork: %s, want ErrForeignProc naming the namespace and --mount-proc", out)
	}
	if took > 5*time.Second {
		t.Errorf("the refusal took %s, want it at once", took)
	}
	out, _ = child("--mount-proc")
	if !strings.Contains(out, "STARTED ") {
		t.Errorf("under unshare --pid --fork --mount-proc: %s, want a sandbox started", out)
	}
}

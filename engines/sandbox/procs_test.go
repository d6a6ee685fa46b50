package sandbox

import (
	"bufio"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// deadPid returns the pid of a process that has exited and been reaped.
func deadPid(t *testing.T) int {
	t.Helper()
	for range 10 {
		cmd := exec.Command("/bin/true")
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		if syscall.Kill(pid, 0) == syscall.ESRCH {
			return pid
		}
	}
	t.Fatal("no dead pid found")
	return 0
}

// orphan starts `sleep 60` as uid through a shell that exits at once, so
// the sleep is adopted by pid 1 (or a subreaper), and returns its pid.
func orphan(t *testing.T, uid int) int {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "sleep 60 </dev/null >/dev/null 2>&1 & echo $!")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("shell printed %q", out)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// alive reports whether pid runs (a zombie does not count).
func alive(pid int) bool {
	_, ok := readProc(pid)
	return ok
}

func ppidOf(t *testing.T, pid int) int {
	t.Helper()
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "PPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	t.Fatal("no PPid line")
	return 0
}

// TestReapOrphans: a process of a derived slot uid whose spade process is
// gone, orphaned to pid 1 (what a SIGKILL of spade during bubblewrap's
// setup leaves), is killed by the next spade process; one whose owner
// lives, one that still has its parent, and one of a uid outside the
// derived range are left alone.
func TestReapOrphans(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("slot uids are used only as root")
	}
	dead := deadPid(t)
	leaked := orphan(t, derivedUIDBase+UIDStride*dead+1)
	if p := ppidOf(t, leaked); p != 1 {
		t.Skipf("orphans are adopted by pid %d here, a subreaper, not pid 1", p)
	}

	owner := exec.Command("sleep", "60")
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = owner.Process.Kill(); _ = owner.Wait() })
	ownerAlive := orphan(t, derivedUIDBase+UIDStride*owner.Process.Pid+1)
	outside := orphan(t, derivedUIDBase-7)
	parented := exec.Command("sleep", "60")
	parented.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(derivedUIDBase + UIDStride*dead + 2), Gid: 0, Groups: []uint32{}}}
	if err := parented.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = parented.Process.Kill(); _ = parented.Wait() })

	killed := reapOrphans(os.Getpid())
	if !slices.Contains(killed, leaked) {
		t.Fatalf("reapOrphans killed %v, not the orphan %d of dead owner %d", killed, leaked, dead)
	}
	for _, pid := range []int{ownerAlive, outside, parented.Process.Pid} {
		if slices.Contains(killed, pid) {
			t.Errorf("reapOrphans killed %d, which it must leave alone", pid)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for alive(leaked) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if alive(leaked) {
		t.Errorf("orphan %d still runs after reapOrphans", leaked)
	}
	for _, pid := range []int{ownerAlive, outside, parented.Process.Pid} {
		if !alive(pid) {
			t.Errorf("process %d was killed", pid)
		}
	}
}

// TestRemoveStaleHarnessDirs: the harness directory of a dead spade
// process is removed; those of live processes, of this process, of the
// old naming and other files are kept; a symlink is removed, not followed.
func TestRemoveStaleHarnessDirs(t *testing.T) {
	tmp := t.TempDir()
	dead := deadPid(t)
	live := exec.Command("sleep", "60")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })
	mk := func(name string) string {
		p := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Join(p, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "sub", "spade_harness.py"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stale := mk(fmt.Sprintf("spade-sandbox-%d-123", dead))
	keep := []string{
		mk(fmt.Sprintf("spade-sandbox-%d-456", live.Process.Pid)),
		mk(fmt.Sprintf("spade-sandbox-%d-789", os.Getpid())),
		mk("spade-sandbox-3141592653"), // the old naming: no pid
		mk("unrelated-1-2"),
	}
	target := mk("target")
	link := filepath.Join(tmp, fmt.Sprintf("spade-sandbox-%d-999", dead))
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	removed := removeStaleHarnessDirs(tmp, os.Getpid())
	slices.Sort(removed)
	want := []string{stale, link}
	slices.Sort(want)
	if !slices.Equal(removed, want) {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	for _, p := range append(keep, filepath.Join(target, "sub", "spade_harness.py")) {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	for _, p := range want {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s still exists (%v)", p, err)
		}
	}
}

// TestBrokenInterpreter: an interpreter that is not a working Python is
// reported as such, not as a bubblewrap failure followed by a fallback to
// running without isolation.
func TestBrokenInterpreter(t *testing.T) {
	var logs strings.Builder
	_, err := New(Config{Python: "/usr/bin/false", Workers: 1, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err == nil {
		t.Fatal("New accepted /usr/bin/false as the interpreter")
	}
	if !strings.Contains(err.Error(), "interpreter /usr/bin/false (sandbox.python) cannot compile the harness") {
		t.Errorf("error %v does not name the interpreter", err)
	}
	if strings.Contains(logs.String(), "WITHOUT ISOLATION") {
		t.Errorf("a broken interpreter was blamed on bubblewrap: %s", logs.String())
	}
}

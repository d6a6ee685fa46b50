package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// procInfo is what /proc/PID/status says about one live process.
type procInfo struct {
	pid, ppid, uid int // uid: the real uid
}

// procProblem says why the proc file system mounted at root (normally
// "/proc") does not show this process's PID namespace, or "" when it
// does: its self link must name pid (this process's os.Getpid), and
// /proc/self/status must list one pid for it (NSpid has a field per
// namespace level from the mount's namespace down to the process's own;
// more than one means the mount belongs to an ancestor namespace, as after
// `unshare --pid --fork` without --mount-proc). Through such a /proc every
// pid is another namespace's: bubblewrap cannot find the sandbox it
// starts, and a pid read there names another process when signalled here.
func procProblem(root string, pid int) string {
	self, err := os.Readlink(filepath.Join(root, "self"))
	if err != nil {
		return fmt.Sprintf("%s does not show this process (%v): it is not mounted, or it is the proc file system of another PID namespace", root, err)
	}
	if self != strconv.Itoa(pid) {
		return fmt.Sprintf("%s belongs to another PID namespace: %s/self names pid %s, but this process is pid %d in its own PID namespace", root, root, self, pid)
	}
	b, err := os.ReadFile(filepath.Join(root, "self", "status"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
			if f := strings.Fields(rest); len(f) > 1 {
				return fmt.Sprintf("%s belongs to another PID namespace: it shows this process as pid %s, and pid %s is its pid in its own PID namespace", root, f[0], f[len(f)-1])
			}
		}
	}
	return ""
}

// ownProc reports whether /proc shows this process's PID namespace
// (procProblem "" for "/proc"), checked once per process. Nothing found
// through a /proc of another namespace is ever signalled: liveProcesses
// lists nothing then.
var ownProc = sync.OnceValue(func() bool { return procProblem("/proc", os.Getpid()) == "" })

// liveProcesses lists every process in /proc that is not a zombie, with its
// parent and real uid. Processes that end during the scan are skipped. It
// lists none when /proc belongs to another PID namespace (ownProc): its
// pids name other processes here.
func liveProcesses() []procInfo {
	if !ownProc() {
		return nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []procInfo
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			out = append(out, p)
		}
	}
	return out
}

// readProc reads pid's parent and real uid from /proc/PID/status; false
// when the process is gone or a zombie (which can do nothing and is reaped
// by whoever inherited it).
func readProc(pid int) (procInfo, bool) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return procInfo{}, false
	}
	defer f.Close()
	p := procInfo{pid: pid, ppid: -1, uid: -1}
	sc := bufio.NewScanner(f)
	// State, PPid and Uid come in that order, near the top (Linux's
	// fs/proc/array.c).
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "State:"):
			if strings.Contains(line, "Z (") || strings.Contains(line, "X (") {
				return procInfo{}, false
			}
		case strings.HasPrefix(line, "PPid:"):
			p.ppid, _ = strconv.Atoi(strings.TrimSpace(line[len("PPid:"):]))
		case strings.HasPrefix(line, "Uid:"):
			if fields := strings.Fields(line); len(fields) > 1 {
				p.uid, _ = strconv.Atoi(fields[1])
			}
			return p, p.uid >= 0
		}
	}
	return procInfo{}, false
}

// uidProcesses lists the pids whose real uid is uid, from /proc. Workers run
// under a uid of their own when spade runs as root, so this finds every
// process a sandbox left behind, daemons that called setsid included.
func uidProcesses(uid int) []int {
	var pids []int
	for _, p := range liveProcesses() {
		if p.uid == uid {
			pids = append(pids, p.pid)
		}
	}
	return pids
}

// derivedUIDBase is where slot uids derived from process ids start
// (Config.UIDBase 0): process p owns derivedUIDBase + UIDStride*p onwards.
const derivedUIDBase = 1_000_000

// reapOrphans kills what a spade process killed with SIGKILL may leave: a
// process of one of its derived slot uids, orphaned to pid 1, whose owner
// process (the pid the uid derives from) is gone. bubblewrap's sandbox
// process waits on an eventfd for its monitor before it applies
// --die-with-parent; when the monitor dies in that window (its parent-death
// signal fires as spade dies), the sandbox process waits forever. Nothing of
// the owner's can still need such a process. Processes of a live spade are
// never orphaned to pid 1 (their parent is that spade, its bwrap monitor or
// the sandbox's own pid 1), so an explicit Config.UIDBase that overlaps
// the derived range is safe too. Returns the pids signalled. An orphan
// adopted by a subreaper other than pid 1 is not found.
func reapOrphans(self int) []int {
	var killed []int
	for _, p := range liveProcesses() {
		if p.ppid != 1 || p.uid < derivedUIDBase {
			continue
		}
		owner := (p.uid - derivedUIDBase) / UIDStride
		if owner == self || owner <= 1 {
			continue
		}
		if err := syscall.Kill(owner, 0); err == nil || errors.Is(err, syscall.EPERM) {
			continue // the owner (or a process that took its pid) is alive
		}
		if killOrphan(p) {
			killed = append(killed, p.pid)
		}
	}
	return killed
}

// killOrphan sends SIGKILL to p if it is still the process the scan saw:
// a pidfd pins the process, and its status is read again through the pid,
// so a pid reused after the scan is never signalled.
func killOrphan(p procInfo) bool {
	fd, err := unix.PidfdOpen(p.pid, 0)
	if err != nil {
		return false
	}
	defer func() { _ = unix.Close(fd) }()
	if now, ok := readProc(p.pid); !ok || now.uid != p.uid || now.ppid != 1 {
		return false
	}
	return unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil
}

// killUID sends SIGKILL to every process of uid.
func killUID(uid int) {
	for _, pid := range uidProcesses(uid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// sweepUIDs kills processes of the uids until none remain or wait passes,
// and reports whether they are all clean. Killed processes linger until
// reaped, so it polls; each round scans /proc once for all the uids.
func sweepUIDs(uids []int, wait time.Duration) bool {
	want := make(map[int]bool, len(uids))
	for _, u := range uids {
		want[u] = true
	}
	deadline := time.Now().Add(wait)
	for {
		var pids []int
		for _, p := range liveProcesses() {
			if want[p.uid] {
				pids = append(pids, p.pid)
			}
		}
		if len(pids) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// signalOf converts a signal number reported by the harness.
func signalOf(n int) syscall.Signal { return syscall.Signal(n) }

// harnessDirPrefix starts the name of every harness directory under the
// temporary directory: spade-sandbox-PID-RANDOM, PID the creating process.
const harnessDirPrefix = "spade-sandbox-"

// removeStaleHarnessDirs removes the harness directories under tmp that a
// spade process killed before Sandbox.Close left behind (about 190 KB
// each): those named spade-sandbox-PID-* whose PID is not self and no
// longer runs, and that belong to this process's effective uid (tmp is
// shared with other users). A symlink of that name is removed, never
// followed. Returns the paths removed. Directories of the older naming,
// without a pid, are left alone: nothing tells whose they are.
func removeStaleHarnessDirs(tmp string, self int) []string {
	entries, err := os.ReadDir(tmp)
	if err != nil {
		return nil
	}
	var removed []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), harnessDirPrefix)
		if !ok {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || pid == self {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			continue // the owner (or a process that took its pid) runs
		}
		path := filepath.Join(tmp, e.Name())
		fi, err := os.Lstat(path)
		if err != nil {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		if os.RemoveAll(path) == nil {
			removed = append(removed, path)
		}
	}
	return removed
}

package sandbox

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// uidProcesses lists the pids whose real uid is uid, from /proc. Workers run
// under a uid of their own when spade runs as root, so this finds every
// process a sandbox left behind, daemons that called setsid included.
func uidProcesses(uid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := strconv.Itoa(uid)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		f, err := os.Open("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			// A zombie can do nothing and is reaped by whoever inherited it.
			if strings.HasPrefix(line, "State:") && (strings.Contains(line, "Z (") || strings.Contains(line, "X (")) {
				break
			}
			if strings.HasPrefix(line, "Uid:") {
				fields := strings.Fields(line)
				if len(fields) > 1 && fields[1] == want {
					pids = append(pids, pid)
				}
				break
			}
		}
		f.Close()
	}
	return pids
}

// killUID sends SIGKILL to every process of uid.
func killUID(uid int) {
	for _, pid := range uidProcesses(uid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// sweepUID kills processes of uid until none remain or wait passes, and
// reports whether the uid is clean. Killed processes linger until reaped, so
// it polls.
func sweepUID(uid int, wait time.Duration) bool {
	deadline := time.Now().Add(wait)
	for {
		pids := uidProcesses(uid)
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

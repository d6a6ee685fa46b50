package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CPU sources a CPUMeter can use, best first.
const (
	// SourceCgroup2 reads cpu.stat usage_usec of a cgroup v2 group the
	// process joined: every descendant counts, reaped or not.
	SourceCgroup2 = "cgroup v2 cpu.stat"
	// SourceCgroup1 reads cpuacct.usage of a cgroup v1 cpuacct group the
	// process joined: every descendant counts, reaped or not.
	SourceCgroup1 = "cgroup v1 cpuacct.usage"
	// SourceRusage is getrusage(RUSAGE_SELF) + getrusage(RUSAGE_CHILDREN).
	// It misses every process that was never waited for by its own parent:
	// a sandbox's Python interpreter dies with SIGKILL inside bubblewrap's
	// PID namespace, so its CPU never reaches RUSAGE_CHILDREN (measured: a
	// paper-scale round reports 5.6 s here against 33.3 s in a cgroup).
	SourceRusage = "getrusage self+children (undercounts killed sandboxes)"
)

// CPUMeter measures the CPU time (user + system) of this process and of
// every process it starts, including ones killed before their parent could
// reap them. It does so by moving the process into a fresh cgroup (v2, else
// v1 cpuacct) whose counter covers all descendants; where no cgroup can be
// created (no permission, no cgroup fs) it falls back to getrusage and says
// so in Source. Differences of Total around a piece of work give that
// work's CPU cost, as long as nothing else in this process runs meanwhile.
type CPUMeter struct {
	source string
	usage  func() (time.Duration, error)
	leave  func() error
}

// NewCPUMeter joins a new cgroup named name-<pid> beneath the process's
// current one and returns a meter reading it. It never fails: without a
// usable cgroup the meter uses getrusage (see SourceRusage). Close it to
// move the process back and remove the group.
func NewCPUMeter(name string) *CPUMeter {
	group := fmt.Sprintf("%s-%d", name, os.Getpid())
	if m, err := joinCgroup2(group); err == nil {
		return m
	}
	if m, err := joinCgroup1(group); err == nil {
		return m
	}
	return &CPUMeter{source: SourceRusage, usage: rusageTotal, leave: func() error { return nil }}
}

// Source names how Total is measured (one of the Source* constants).
func (m *CPUMeter) Source() string { return m.source }

// Total returns the CPU time used so far by the process and its
// descendants since the meter was created (cgroup) or since the process
// started (getrusage). A read error returns 0 and the error.
func (m *CPUMeter) Total() (time.Duration, error) { return m.usage() }

// Close moves the process back to its original cgroup and removes the
// meter's group. Removal fails while a descendant still lives in the group;
// that is reported, not fatal, and the empty group can be removed later.
func (m *CPUMeter) Close() error { return m.leave() }

func rusageTotal() (time.Duration, error) {
	var self, kids syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &self); err != nil {
		return 0, fmt.Errorf("getrusage self: %w", err)
	}
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &kids); err != nil {
		return 0, fmt.Errorf("getrusage children: %w", err)
	}
	return tv(self.Utime) + tv(self.Stime) + tv(kids.Utime) + tv(kids.Stime), nil
}

func tv(t syscall.Timeval) time.Duration {
	return time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond
}

// selfCgroup returns this process's path in the hierarchy whose
// /proc/self/cgroup line matches (controller "" = the v2 line "0::").
func selfCgroup(controller string) (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	return parseSelfCgroup(b, controller)
}

// parseSelfCgroup finds controller's path in /proc/self/cgroup's format
// ("hierarchy-ID:controller-list:path" per line, cgroups(7)).
func parseSelfCgroup(b []byte, controller string) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if controller == "" && parts[0] == "0" && parts[1] == "" {
			return parts[2], nil
		}
		if controller != "" {
			for _, c := range strings.Split(parts[1], ",") {
				if c == controller {
					return parts[2], nil
				}
			}
		}
	}
	return "", fmt.Errorf("no %q line in /proc/self/cgroup", controller)
}

// cgroupMount finds the mount point of a cgroup file system in
// /proc/self/mountinfo (proc(5)): fstype "cgroup2", or "cgroup" with
// option among its super options (e.g. "cpuacct").
func cgroupMount(fstype, option string) (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	return parseCgroupMount(b, fstype, option)
}

func parseCgroupMount(mountinfo []byte, fstype, option string) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 1 || qf[0] != fstype {
			continue
		}
		if option == "" {
			return pf[4], nil
		}
		if len(qf) >= 3 {
			for _, o := range strings.Split(qf[2], ",") {
				if o == option {
					return pf[4], nil
				}
			}
		}
	}
	return "", fmt.Errorf("no %s mount with option %q", fstype, option)
}

func joinCgroup2(group string) (*CPUMeter, error) {
	root, err := cgroupMount("cgroup2", "")
	if err != nil {
		return nil, err
	}
	cur, err := selfCgroup("")
	if err != nil {
		return nil, err
	}
	return join(filepath.Join(root, cur), group, SourceCgroup2, "cpu.stat", func(b []byte) (time.Duration, error) {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
				us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return 0, fmt.Errorf("cpu.stat usage_usec %q: %w", v, err)
				}
				return time.Duration(us) * time.Microsecond, nil
			}
		}
		return 0, errors.New("cpu.stat has no usage_usec")
	})
}

func joinCgroup1(group string) (*CPUMeter, error) {
	root, err := cgroupMount("cgroup", "cpuacct")
	if err != nil {
		return nil, err
	}
	cur, err := selfCgroup("cpuacct")
	if err != nil {
		return nil, err
	}
	return join(filepath.Join(root, cur), group, SourceCgroup1, "cpuacct.usage", func(b []byte) (time.Duration, error) {
		ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("cpuacct.usage %q: %w", b, err)
		}
		return time.Duration(ns), nil
	})
}

// join creates parent/group, moves this process into it and checks that
// the counter file reads.
func join(parent, group, source, file string, parse func([]byte) (time.Duration, error)) (*CPUMeter, error) {
	dir := filepath.Join(parent, group)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	pid := []byte(strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), pid, 0); err != nil {
		_ = os.Remove(dir)
		return nil, err
	}
	leave := func() error {
		if err := os.WriteFile(filepath.Join(parent, "cgroup.procs"), pid, 0); err != nil {
			return fmt.Errorf("leave cgroup %s: %w", dir, err)
		}
		// Processes just killed may take a moment to leave the group.
		var err error
		for range 50 {
			if err = os.Remove(dir); err == nil {
				return nil
			}
			time.Sleep(20 * time.Millisecond)
		}
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	usage := func() (time.Duration, error) {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", file, err)
		}
		return parse(b)
	}
	if _, err := usage(); err != nil {
		_ = leave()
		return nil, err
	}
	return &CPUMeter{source: source, usage: usage, leave: leave}, nil
}

package sandbox

// The sandbox's launch: the harness files written to disk, the limits and
// environment the harness is given, and the bubblewrap command line.

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// writeHarness copies the embedded Python files into a fresh directory that
// an unprivileged worker uid can read (0755 dirs, 0644 files), and compiles
// them once so no worker pays for compiling the harness.
func writeHarness(python string) (string, error) {
	// The pid in the name lets a later process remove the directory if
	// this one is killed before Close (removeStaleHarnessDirs).
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", harnessDirPrefix, os.Getpid()))
	if err != nil {
		return "", fmt.Errorf("sandbox: create harness dir: %w", err)
	}
	err = fs.WalkDir(pythonFiles, "python", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(path, "python"), "/")
		dst := filepath.Join(dir, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		data, err := pythonFiles.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o644)
	})
	if err == nil {
		// Bytecode saves every worker the compile; a failure here also
		// says the interpreter itself is unusable (not a Python >= 3.10,
		// not a Python at all), which must not be blamed on bubblewrap.
		if out, cerr := exec.Command(python, "-S", "-s", "-m", "compileall", "-q", dir).CombinedOutput(); cerr != nil {
			os.RemoveAll(dir)
			return "", fmt.Errorf("sandbox: interpreter %s (sandbox.python) cannot compile the harness, so it is not a working Python >= 3.10: %w%s", python, cerr, outputTail(out))
		}
		err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return os.Chmod(path, 0o755)
			}
			return os.Chmod(path, 0o644)
		})
	}
	if err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("sandbox: write harness files to %s: %w", dir, err)
	}
	return dir, nil
}

// limitsJSON is the harness's argv[1]: the rlimits it applies to itself
// before running any program code.
func (s *Sandbox) limitsJSON() string {
	procs := s.cfg.Processes
	if s.isolation != IsolationBwrap && s.uidBase < 0 {
		// Outside a user namespace and without a private uid, RLIMIT_NPROC
		// would count every process of the invoking user.
		procs = 0
	}
	b, _ := json.Marshal(map[string]any{
		"memory_bytes":    s.cfg.MemoryBytes,
		"cpu_seconds":     s.cfg.CPUSeconds,
		"file_size_bytes": s.cfg.FileSizeBytes,
		"open_files":      s.cfg.OpenFiles,
		"processes":       procs,
		"reply_bytes":     s.cfg.ReplyBytes,
		// kill(-1) after each episode is safe only where it reaches the
		// sandbox's own processes: a pid namespace or a dedicated uid.
		"reap_strays": s.isolation == IsolationBwrap || s.uidBase >= 0,
		// The uid is the slot's own, not the invoking user's: the harness
		// may empty its user keyrings.
		"own_uid": s.uidBase >= 0,
		// Under bubblewrap the harness is the pid namespace's init and forks
		// one process per program (spade_harness.py, "zygote").
		"zygote": s.isolation == IsolationBwrap,
	})
	return string(b)
}

// childEnv is the whole environment of the sandbox: nothing is inherited,
// so no parent credential (AWS_SECRET_ACCESS_KEY, OPENAI_API_KEY, ...) can
// leak. PYTHONHASHSEED is fixed so set and dict-of-str orders are
// reproducible. LD_BIND_NOW has the dynamic linker resolve every symbol
// when the harness starts, so no program process forked from it writes
// the resolutions again (~15 page faults each; docs/benchmarks.md).
func (s *Sandbox) childEnv() []string {
	return []string{
		"PATH=/usr/bin:/bin",
		"PYTHONHASHSEED=0",
		"PYTHONDONTWRITEBYTECODE=1",
		"LANG=C.UTF-8",
		"LD_BIND_NOW=1",
	}
}

// argv is the command line of one worker; seccompFD, when >= 0, is the
// descriptor (in the child) bwrap reads its seccomp program from.
func (s *Sandbox) argv(seccompFD int) []string {
	py := []string{s.cfg.Python, "-S", "-s", "-B"}
	if s.isolation != IsolationBwrap {
		return append(py, filepath.Join(s.harnessDir, "spade_run.py"), s.limitsArg)
	}
	a := []string{s.bwrap,
		"--unshare-all", "--unshare-user", "--disable-userns",
		"--die-with-parent", "--new-session", "--clearenv", "--cap-drop", "ALL",
		"--as-pid-1", "--hostname", "sandbox",
		"--ro-bind", "/usr", "/usr",
	}
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		if target, err := os.Readlink(d); err == nil {
			a = append(a, "--symlink", target, d)
		} else if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			a = append(a, "--ro-bind", d, d)
		}
	}
	for _, f := range []string{"/etc/alternatives", "/etc/ld.so.cache", "/etc/localtime"} {
		a = append(a, "--ro-bind-try", f, f)
	}
	if prefix := pythonPrefix(s.cfg.Python); prefix != "" {
		a = append(a, "--ro-bind", prefix, prefix)
	}
	a = append(a,
		"--ro-bind", s.harnessDir, "/spade",
		"--proc", "/proc",
		"--dev", "/dev",
		// bwrap's /dev/shm is part of the /dev tmpfs, sized at half the
		// host's RAM; give it the same bound as /tmp.
		"--size", fmt.Sprint(s.cfg.TmpfsBytes), "--perms", "1777", "--tmpfs", "/dev/shm",
		"--size", fmt.Sprint(s.cfg.TmpfsBytes), "--perms", "1777", "--tmpfs", "/tmp",
		"--chdir", "/tmp",
		// bwrap's root is a tmpfs; make it read-only so only /tmp is writable.
		"--remount-ro", "/",
	)
	for _, kv := range s.childEnv() {
		k, v, _ := strings.Cut(kv, "=")
		a = append(a, "--setenv", k, v)
	}
	if seccompFD >= 0 {
		a = append(a, "--seccomp", fmt.Sprint(seccompFD))
	}
	a = append(a, "--")
	a = append(a, py...)
	return append(a, "/spade/spade_run.py", s.limitsArg)
}

// prefixProblem says why an interpreter's installation prefix must not be
// bound into the sandbox, or "" when it may: "/" or a top-level directory
// (/python3, /opt/bin/python3) would show far more than Python, and a
// directory without lib/python3.* (a script or a lone binary in ~/bin)
// is not an installation and may be a home directory.
func prefixProblem(prefix string) string {
	if strings.Count(strings.Trim(prefix, "/"), "/") < 1 {
		return "is too broad"
	}
	if m, _ := filepath.Glob(filepath.Join(prefix, "lib", "python3*")); len(m) == 0 {
		return "holds no lib/python3.* (it is not a Python installation)"
	}
	return ""
}

// pythonPrefix returns the installation prefix to bind when the interpreter
// lives outside /usr (e.g. /opt/python3.12/bin/python3 -> /opt/python3.12),
// or "" when /usr already covers it.
func pythonPrefix(python string) string {
	real, err := filepath.EvalSymlinks(python)
	if err != nil {
		real = python
	}
	if strings.HasPrefix(real, "/usr/") {
		return ""
	}
	return filepath.Dir(filepath.Dir(real))
}

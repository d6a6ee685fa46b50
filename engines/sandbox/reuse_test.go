package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSandboxReuseIsClean runs a program that litters its sandbox (files in
// /tmp, an unwritable directory, /dev/shm, a setsid daemon flooding the
// reply channel with forged frames) and then, in the same slot, a program
// that reports what it can see: nothing of the first may reach it. A
// program that changes /dev gets its sandbox replaced, and with
// ProgramsPerSandbox 1 every program gets a fresh one.
// reuseLitter leaves every kind of state a program can leave in a sandbox
// (files, xattrs, a default ACL, keys, a message queue, times, a daemon that
// forges frames); TestSandboxReuseIsClean checks none of it reaches the next
// program. "if DEV:" is replaced with the subtest's choice.
const reuseLitter = `
import os, time
from spade_env import Env
class Litter(Env):
    def reset(self, seed=None):
        super().reset(seed)
        open("/tmp/left.txt", "w").write("a")
        os.makedirs("/tmp/d/e", exist_ok=True)
        open("/tmp/d/e/f", "w").write("c")
        os.chmod("/tmp/d/e", 0o500)
        os.chmod("/tmp/d", 0o500)
        open("/dev/shm/left", "w").write("b")
        # Attributes of the shared directories themselves, and keys: a
        # default ACL (owner read-only) would govern the next program's
        # files in /tmp; an xattr or a key is a channel to it.
        os.setxattr("/tmp", "user.note", b"left")
        os.setxattr("/dev/shm", "user.note", b"left")
        acl = (2).to_bytes(4, "little") + b"".join(
            tag.to_bytes(2, "little") + (4).to_bytes(2, "little") + (0xFFFFFFFF).to_bytes(4, "little")
            for tag in (0x01, 0x04, 0x20))  # user::r--, group::r--, other::r--
        os.setxattr("/tmp", "system.posix_acl_default", acl)
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        add_key = {"x86_64": 248, "aarch64": 217}[os.uname().machine]
        for ring in (-3, -4, -5):  # session, user, user-session keyrings
            libc.syscall(add_key, b"user", b"left", b"x", 1, ring)
        libc.mq_open(b"/spade-left", 0o100 | 0o2, 0o600, None)  # O_CREAT|O_RDWR: a message queue
        for path in ("/tmp", "/dev/shm", "/dev", "/dev/ptmx"):  # 64 bits each
            os.utime(path, ns=(0x48454C4C4F2D4221, 0x48454C4C4F2D4221), follow_symlinks=False)
        if DEV:
            open("/dev/planted", "w").write("d")
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(0.2)  # after the reset reply: flood while the program closes
                forged = b'{"ok":true,"meta":{"class":"Forged","kind":"game"}}'
                frame = len(forged).to_bytes(4, "big") + forged
                while True:
                    try:
                        os.write(4, frame)
                    except OSError:
                        time.sleep(0.01)
            os._exit(0)
        time.sleep(0.1)
        return "littered", {}
`

// reuseObserver reports, as its reset observation, the state reuseLitter
// leaves (TestSandboxReuseIsClean).
const reuseObserver = `
import ctypes, json, os, tempfile
from spade_env import Env
libc = ctypes.CDLL(None, use_errno=True)
keyctl = {"x86_64": 250, "aarch64": 219}[os.uname().machine]
class Clean(Env):
    def reset(self, seed=None):
        super().reset(seed)
        times = [os.stat(p, follow_symlinks=False).st_mtime_ns for p in ("/tmp", "/dev/shm", "/dev", "/dev/ptmx")]
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid()))
        live = [p for p in pids if "State:\tZ" not in open(f"/proc/{p}/status").read()]
        keys = 0
        for ring in (-3, -4, -5):
            n = libc.syscall(keyctl, 11, ring, None, 0)  # KEYCTL_READ: bytes of key serials
            keys += max(n, 0) // 4
        mq = libc.mq_open(b"/spade-left", 0)  # O_RDONLY
        mq_errno = ctypes.get_errno() if mq < 0 else 0
        seen = {"tmp": os.listdir("/tmp"), "shm": os.listdir("/dev/shm"), "mq_errno": mq_errno,
                "planted": os.path.exists("/dev/planted"), "others": live,
                "xattrs": os.listxattr("/tmp") + os.listxattr("/dev/shm"), "keys": keys, "times": times}
        d = tempfile.mkdtemp()  # a default ACL would make this read-only
        open(os.path.join(d, "state.txt"), "w").write("ok")
        os.unlink(os.path.join(d, "state.txt"))
        os.rmdir(d)
        return json.dumps(seen), {}
`

// reuseFlood fills the reply pipe from a daemon, then has its own
// process killed (TestSandboxReuseIsClean).
const reuseFlood = `
import os, signal, time
from spade_env import Env
class Flood(Env):
    def reset(self, seed=None):
        super().reset(seed)
        me = os.getpid()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                while True:
                    os.write(4, b"\x00\x00\x00\x05junk!")
            time.sleep(0.4)
            os.kill(me, signal.SIGKILL)
            os._exit(0)
        return "flooding", {}
`

// reuseDeep nests 1,200 directories in /tmp (TestSandboxReuseIsClean).
const reuseDeep = `
import os
from spade_env import Env
class Deep(Env):
    def reset(self, seed=None):
        super().reset(seed)
        os.chdir("/tmp")
        for _ in range(1200):
            os.mkdir("d")
            os.chdir("d")
        return "deep", {}
`

// reuseReport reports the zygote and shared-descriptor state a program
// process can change (TestSandboxReuseIsClean).
const reuseReport = `
import fcntl, json, os, resource
from spade_env import Env
class Report(Env):
    def reset(self, seed=None):
        super().reset(seed)
        return json.dumps({
            "as": resource.getrlimit(resource.RLIMIT_AS),
            "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "sched": os.sched_getscheduler(0),
            "cpus": len(os.sched_getaffinity(0)),
            "tmp": oct(os.stat("/tmp").st_mode),
            "fd3": fcntl.fcntl(3, fcntl.F_GETFL), "own3": fcntl.fcntl(3, fcntl.F_GETOWN),
            "fd4": fcntl.fcntl(4, fcntl.F_GETFL), "sig4": fcntl.fcntl(4, fcntl.F_GETSIG),
            "shm": open("/proc/sysvipc/shm").read().count("\n"),
            "shm_size": os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize,
        }), {}
`

func TestSandboxReuseIsClean(t *testing.T) {
	ctx := context.Background()
	look := func(t *testing.T, sb *Sandbox) map[string]any {
		t.Helper()
		p, err := sb.Load(ctx, reuseObserver)
		require.NoError(t, err)
		defer p.Close()
		assert.Equal(t, "Clean", p.Meta().Class, "a forged frame was read as the load reply")
		e, err := p.Reset(ctx, 1)
		require.NoError(t, err)
		defer e.Close()
		var seen map[string]any
		require.NoError(t, json.Unmarshal([]byte(e.Observation), &seen))
		if keyringFilter() == nil {
			delete(seen, "mq_errno")
		}
		return seen
	}
	litterOnce := func(t *testing.T, sb *Sandbox, dev bool) {
		t.Helper()
		src := strings.Replace(reuseLitter, "if DEV:", fmt.Sprintf("if %v:", map[bool]string{true: "True", false: "False"}[dev]), 1)
		p, err := sb.Load(ctx, src)
		require.NoError(t, err)
		e, err := p.Reset(ctx, 1)
		require.NoError(t, err)
		assert.Equal(t, "littered", e.Observation)
		time.Sleep(500 * time.Millisecond) // the daemon fills the reply pipe with forged frames
		require.NoError(t, p.Close())      // the episode is still open: the daemon runs
	}
	clean := map[string]any{"tmp": []any{}, "shm": []any{}, "planted": false, "others": []any{}, "xattrs": []any{}, "keys": 0.0, "times": []any{0.0, 0.0, 0.0, 0.0}, "mq_errno": 38.0}
	if keyringFilter() == nil {
		// No seccomp filter on this architecture: a message queue the
		// litter left is still there (docs/sandbox.md); not checked.
		delete(clean, "mq_errno")
	}

	t.Run("reused", func(t *testing.T) {
		sb := newSandbox(t, func(c *Config) { c.Workers = 1 })
		for range 3 {
			litterOnce(t, sb, false)
			zygote := sb.idle[0]
			require.NotNil(t, zygote, "a clean sandbox stays as the slot's zygote")
			assert.Equal(t, clean, look(t, sb))
			assert.Same(t, zygote, sb.idle[0], "the sandbox was reused")
		}
	})
	t.Run("dev changed", func(t *testing.T) {
		sb := newSandbox(t, func(c *Config) { c.Workers = 1 })
		litterOnce(t, sb, true)
		assert.Nil(t, sb.idle[0], "a sandbox whose /dev changed must be replaced")
		assert.Equal(t, clean, look(t, sb))
	})
	t.Run("program dies behind a full reply pipe", func(t *testing.T) {
		// A daemon fills the reply pipe, then the program's process is
		// killed while Go waits for nothing: the zygote must not block
		// writing program_ended, the reap must succeed (the sandbox stays
		// the slot's zygote), and the next program must read none of the
		// junk.
		sb := newSandbox(t, func(c *Config) { c.Workers = 1 })
		p, err := sb.Load(ctx, reuseFlood)
		require.NoError(t, err)
		e, err := p.Reset(ctx, 1)
		require.NoError(t, err)
		assert.Equal(t, "flooding", e.Observation)
		time.Sleep(time.Second) // the pipe fills, the program process dies
		require.NoError(t, p.Close())
		assert.NotNil(t, sb.idle[0], "the reap failed: the zygote blocked on the full pipe")
		assert.Equal(t, clean, look(t, sb))
	})
	t.Run("tmp too deep to empty", func(t *testing.T) {
		// 1,200 nested directories: past Python's recursion limit and
		// PATH_MAX for the zygote's wipe. The sandbox must be replaced, not
		// crash or be reused dirty.
		sb := newSandbox(t, func(c *Config) { c.Workers = 1 })
		p, err := sb.Load(ctx, reuseDeep)
		require.NoError(t, err)
		e, err := p.Reset(ctx, 1)
		require.NoError(t, err)
		assert.Equal(t, "deep", e.Observation)
		require.NoError(t, p.Close())
		assert.Nil(t, sb.idle[0], "a sandbox whose /tmp could not be emptied must be replaced")
		assert.Equal(t, clean, look(t, sb))
	})
	t.Run("shared process state", func(t *testing.T) { testReuseSharedState(t, ctx) })
	t.Run("one program per sandbox", func(t *testing.T) {
		sb := newSandbox(t, func(c *Config) { c.Workers = 1; c.ProgramsPerSandbox = 1 })
		litterOnce(t, sb, false)
		assert.Nil(t, sb.idle[0])
		assert.Equal(t, clean, look(t, sb))
	})
}

// testReuseSharedState is TestSandboxReuseIsClean's "shared process state"
// subtest, a function of its own to keep the test short.
func testReuseSharedState(t *testing.T, ctx context.Context) {
	// What a program process can change on the zygote itself or on the
	// file descriptions all programs share (found by review): the next
	// program must see exactly what a fresh sandbox shows.
	attacks := map[string]string{
		"sigio on the request pipe":                `fcntl.fcntl(3, fcntl.F_SETOWN, -1); fcntl.fcntl(3, fcntl.F_SETFL, fcntl.fcntl(3, fcntl.F_GETFL) | os.O_ASYNC)`,
		"signal and packet mode on the reply pipe": `threading.Thread(target=lambda: (time.sleep(0.2), fcntl.fcntl(4, fcntl.F_SETSIG, 9), fcntl.fcntl(4, fcntl.F_SETFL, fcntl.fcntl(4, fcntl.F_GETFL) | os.O_DIRECT))).start()`,
		"lower the zygote's rlimits":               `resource.prlimit(1, resource.RLIMIT_AS, (200 << 20, 200 << 20))`,
		"deprioritise the zygote":                  `os.setpriority(os.PRIO_PROCESS, 1, 19); os.sched_setaffinity(1, {min(os.sched_getaffinity(0))})`,
		"read-only /tmp":                           `os.chmod("/tmp", 0o555)`,
		"System V shared memory":                   `ctypes.CDLL(None).shmget(0, 1 << 20, 0o1600)`,
	}
	sbFresh := newSandbox(t, func(c *Config) { c.Workers = 1 })
	observe := func(t *testing.T, sb *Sandbox) string {
		t.Helper()
		p, err := sb.Load(ctx, reuseReport)
		require.NoError(t, err)
		defer p.Close()
		e, err := p.Reset(ctx, 1)
		require.NoError(t, err)
		defer e.Close()
		return e.Observation
	}
	want := observe(t, sbFresh)
	assert.Contains(t, want, `"shm": 1,`, "a fresh sandbox has no segment (header line only)")
	for name, attack := range attacks {
		t.Run(name, func(t *testing.T) {
			sb := newSandbox(t, func(c *Config) { c.Workers = 1 })
			src := "import ctypes, fcntl, os, resource, threading, time\nfrom spade_env import Env\n" +
				"class Attack(Env):\n    def reset(self, seed=None):\n        super().reset(seed)\n        " +
				attack + "\n        return 'done', {}\n"
			p, err := sb.Load(ctx, src)
			require.NoError(t, err)
			e, err := p.Reset(ctx, 1)
			require.NoError(t, err, "the attack itself must run")
			assert.Equal(t, "done", e.Observation)
			time.Sleep(400 * time.Millisecond)
			require.NoError(t, p.Close())
			for range 2 {
				assert.Equal(t, want, observe(t, sb))
			}
		})
	}
}

// TestResetFresh: ResetFresh plays an episode on the class of a second
// execution of the program's code, so a value drawn once at module level
// differs from the loaded class's, while the loaded class (later Resets)
// keeps its own; module-level code that cannot run twice falls back to the
// loaded class.
func TestResetFresh(t *testing.T) {
	const salted = `import os
from spade_env import Env
SALT = os.urandom(8).hex()
class E(Env):
    max_turns = 2
    def reset(self, seed=None):
        super().reset(seed)
        return SALT, {}
    def step(self, a):
        return SALT, 0.0, True, False, {}
`
	const once = `from spade_env import Env
open("/tmp/once", "x").close()
class E(Env):
    max_turns = 2
    def reset(self, seed=None):
        super().reset(seed)
        return "same", {}
    def step(self, a):
        return "same", 0.0, True, False, {}
`
	obs := func(t *testing.T, p *Program, fresh bool) string {
		t.Helper()
		reset := p.Reset
		if fresh {
			reset = p.ResetFresh
		}
		e, err := reset(context.Background(), 1)
		require.NoError(t, err)
		defer func() { require.NoError(t, e.Close()) }()
		r, err := e.Step(context.Background(), "x")
		require.NoError(t, err)
		require.Equal(t, e.Observation, r.Observation)
		return e.Observation
	}
	for _, fork := range []bool{true, false} {
		t.Run(fmt.Sprintf("fork=%v", fork), func(t *testing.T) {
			sb := newSandbox(t, func(c *Config) { c.ForkEpisodes = fork })
			p, err := sb.Load(context.Background(), salted)
			require.NoError(t, err)
			defer p.Close()
			loaded := obs(t, p, false)
			fresh := obs(t, p, true)
			assert.Len(t, fresh, 16)
			assert.NotEqual(t, loaded, fresh, "a second execution draws another salt")
			assert.Equal(t, loaded, obs(t, p, false), "the loaded class keeps its salt")
			assert.NotEqual(t, fresh, obs(t, p, true))

			q, err := sb.Load(context.Background(), once)
			require.NoError(t, err)
			defer q.Close()
			assert.Equal(t, "same", obs(t, q, true), "falls back to the loaded class")
			assert.Equal(t, "same", obs(t, q, false))
		})
	}
}

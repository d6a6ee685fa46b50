package sandbox

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// What a sandbox must not inherit from the process that starts it, though
// neither bubblewrap's namespaces nor Go's exec cover it (found by a red
// team): descriptors opened without close-on-exec, and the session keyring.

// fdLister reports every descriptor above 2 open in the program's process.
const fdLister = `
import json, os
from spade_env import Env
class Fds(Env):
    def reset(self, seed=None):
        super().reset(seed)
        open_fds = []
        for fd in range(3, 8192):
            try:
                os.fstat(fd)
                open_fds.append(fd)
            except OSError:
                pass
        return json.dumps(open_fds), {}
`

// TestInheritedDescriptorsClosed: a file and a directory the spade process
// holds without close-on-exec (as a shell redirection leaves them) are not
// open in a program's process; only the two frame pipes are.
func TestInheritedDescriptorsClosed(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.txt")
	require.NoError(t, os.WriteFile(secret, []byte("host secret"), 0o600))
	// syscall.Open, unlike os.Open, does not set O_CLOEXEC.
	fileFD, err := syscall.Open(secret, syscall.O_RDONLY, 0)
	require.NoError(t, err)
	defer syscall.Close(fileFD)
	dirFD, err := syscall.Open("/", syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	require.NoError(t, err)
	defer syscall.Close(dirFD)
	// A high number too, above the 1,024 descriptors the lister probes and
	// above any range a harness might guess.
	const highFD = 5000
	require.NoError(t, syscall.Dup2(fileFD, highFD))
	defer syscall.Close(highFD)

	for _, bwrap := range []bool{true, false} {
		t.Run(map[bool]string{true: "bwrap", false: "no bwrap"}[bwrap], func(t *testing.T) {
			sb := newSandbox(t, func(c *Config) {
				c.Workers = 1
				c.NoBwrap = !bwrap
			})
			_, e := startEpisode(t, sb, fdLister)
			var fds []int
			require.NoError(t, json.Unmarshal([]byte(e.Observation), &fds))
			assert.Equal(t, []int{3, 4}, fds, "host descriptors %d and %d must not reach the program", fileFD, dirFD)
		})
	}
}

// keyringProbe looks for the test's host key through every keyring a
// program can name, and by search.
const keyringProbe = `
import ctypes, json, os
from spade_env import Env
libc = ctypes.CDLL(None, use_errno=True)
NR = {"x86_64": 250, "aarch64": 219}[os.uname().machine]
def keyctl(*a):
    return libc.syscall(NR, *a)
class Keys(Env):
    def reset(self, seed=None):
        super().reset(seed)
        found = []
        for ring in (-3, -4, -5):  # session, user, user-session
            buf = ctypes.create_string_buffer(4096)
            n = keyctl(11, ring, buf, 4096)  # KEYCTL_READ: the key serials
            for i in range(0, max(n, 0), 4):
                key = int.from_bytes(buf.raw[i:i + 4], "little")
                val = ctypes.create_string_buffer(4096)
                m = keyctl(11, key, val, 4096)
                found.append(val.raw[:max(m, 0)].decode("latin-1"))
        searched = keyctl(10, -3, b"user", b"spade-test-host-key", 0)  # KEYCTL_SEARCH
        errno = ctypes.get_errno() if searched < 0 else 0
        return json.dumps({"found": found, "search": searched, "errno": errno}), {}
`

// TestHostKeyringUnreachable runs itself again under a session keyring that
// holds a key (what a PAM login or a systemd service gives the process that
// starts spade), and checks that no program can read it.
func TestHostKeyringUnreachable(t *testing.T) {
	if os.Getenv("SPADE_TEST_KEYRING_CHILD") == "" {
		py, err := exec.LookPath("python3")
		require.NoError(t, err)
		wrapper := `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
NR_KEYCTL, NR_ADD_KEY = {"x86_64": (250, 248), "aarch64": (219, 217)}[os.uname().machine]
if libc.syscall(NR_KEYCTL, 1, b"spade-test-session") < 0:  # KEYCTL_JOIN_SESSION_KEYRING
    print("SKIP: keyctl unavailable:", os.strerror(ctypes.get_errno())); sys.exit(0)
if libc.syscall(NR_ADD_KEY, b"user", b"spade-test-host-key", b"hunter2", 7, -3) < 0:
    sys.exit("add_key: " + os.strerror(ctypes.get_errno()))
os.execve(sys.argv[1], sys.argv[1:], dict(os.environ, SPADE_TEST_KEYRING_CHILD="1"))
`
		out, err := exec.Command(py, "-c", wrapper, os.Args[0], "-test.run", "^TestHostKeyringUnreachable$", "-test.count", "1", "-test.v").CombinedOutput()
		require.NoError(t, err, "%s", out)
		if s := string(out); len(s) >= 5 && s[:5] == "SKIP:" {
			t.Skip(s)
		}
		require.Contains(t, string(out), "--- PASS: TestHostKeyringUnreachable", "%s", out)
		return
	}
	sb := newSandbox(t, func(c *Config) { c.Workers = 1 })
	_, e := startEpisode(t, sb, keyringProbe)
	var seen struct {
		Found  []string `json:"found"`
		Search int64    `json:"search"`
		Errno  int      `json:"errno"`
	}
	require.NoError(t, json.Unmarshal([]byte(e.Observation), &seen))
	assert.NotContains(t, seen.Found, "hunter2", "the host's key is readable from the sandbox")
	assert.Less(t, seen.Search, int64(0), "the host's key is found by search from the sandbox")
	if keyringFilter() != nil && sb.Isolation() == IsolationBwrap {
		// The seccomp filter answers every keyring call: the invoking
		// user's own keys (non-root: the same uid) and the per-uid
		// persistent keyring and quota are out of reach too.
		assert.Equal(t, 38, seen.Errno, "keyctl must fail with ENOSYS under the filter")
	}
}

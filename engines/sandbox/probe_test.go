package sandbox

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestInterpreterHiddenFromSandboxIsRefused: an interpreter the sandbox
// cannot see (here a wrapper script under the host's /tmp, which the
// sandbox replaces with its own; in practice a pyenv shim under $HOME)
// made the bubblewrap probe fail, and New then fell back to running
// environments with rlimits only, behind a warning, although bubblewrap
// works. New now refuses and names the interpreter.
func TestInterpreterHiddenFromSandboxIsRefused(t *testing.T) {
	prefix := t.TempDir()
	dir := filepath.Join(prefix, "bin")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(prefix, "lib", "python3.11"), 0o755)) // looks like an installation
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	shim := filepath.Join(dir, "python3")
	require.NoError(t, os.WriteFile(shim, []byte("#!/bin/sh\nexec /usr/bin/python3 \"$@\"\n"), 0o755))

	sb, err := New(Config{Python: shim, Workers: 1, LoadTimeout: 10 * time.Second})
	if sb != nil {
		t.Logf("isolation: %s", sb.Isolation())
		require.NoError(t, sb.Close())
	}
	require.Error(t, err)
	require.Contains(t, err.Error(), "bubblewrap works here, but the Python harness does not start inside it with "+shim)
	require.NotErrorIs(t, err, ErrNoIsolation)
}

// TestBroadInterpreterPrefixIsRefused: the sandbox binds the installation
// prefix of an interpreter outside /usr read-only (two levels above the
// binary). For a script in a directory of its own that is not a Python
// installation (~/bin/python3 gives the whole home), or for /opt/bin/python3
// (all of /opt), it bound that directory whole. New now refuses.
func TestBroadInterpreterPrefixIsRefused(t *testing.T) {
	prefix := t.TempDir() // stands for a home directory: no lib/python3.*
	require.NoError(t, os.Mkdir(filepath.Join(prefix, "bin"), 0o755))
	shim := filepath.Join(prefix, "bin", "python3")
	require.NoError(t, os.WriteFile(shim, []byte("#!/bin/sh\nexec /usr/bin/python3 \"$@\"\n"), 0o755))
	_, err := New(Config{Python: shim, Workers: 1})
	require.ErrorContains(t, err, "the sandbox would show its installation prefix "+prefix+" read-only, which holds no lib/python3.*")

	require.Equal(t, "is too broad", prefixProblem("/"))
	require.Equal(t, "is too broad", prefixProblem("/opt"))
	inst := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(inst, "lib", "python3.12"), 0o755))
	require.Equal(t, "", prefixProblem(inst))
}

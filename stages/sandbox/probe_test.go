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
	dir := filepath.Join(t.TempDir(), "bin")
	require.NoError(t, os.MkdirAll(dir, 0o755))
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

package pyhelper_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/pyhelper"
)

// TestRun runs a real helper with the system interpreter: stdin reaches
// it, stdout comes back, Env is set; a failing script is an *Error with
// its stderr's tail; a missing interpreter gets the setting's hint.
func TestRun(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 on PATH")
	}
	ctx := context.Background()
	echo := pyhelper.Script{Name: "echo.py", Source: []byte("import os, sys\nsys.stdout.write(os.environ['X'] + sys.stdin.read())\n")}
	out, err := pyhelper.Run(ctx, echo, pyhelper.Call{Python: py, Setting: "x.python", Stdin: []byte("in"), Env: []string{"X=env:"}})
	require.NoError(t, err)
	require.Equal(t, "env:in", string(out))

	fail := pyhelper.Script{Name: "fail.py", Source: []byte("import sys\nsys.stderr.write('a' * 50 + 'END')\nsys.exit(3)\n")}
	_, err = pyhelper.Run(ctx, fail, pyhelper.Call{Python: py, Setting: "x.python", StderrTail: 10})
	var pe *pyhelper.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "...aaaaaaaEND", pe.Stderr)
	require.Empty(t, pe.Hint)
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee))
	require.Equal(t, 3, ee.ExitCode())

	noMod := pyhelper.Script{Name: "nomod.py", Source: []byte("import spade_no_such_module\n")}
	_, err = pyhelper.Run(ctx, noMod, pyhelper.Call{Python: py, Setting: "x.python"})
	require.ErrorAs(t, err, &pe)
	require.Equal(t, " (x.python must be the pinned venv's interpreter: run `make venv`)", pe.Hint)

	_, err = pyhelper.Run(ctx, echo, pyhelper.Call{Python: "/nonexistent/python", Setting: "x.python"})
	require.ErrorAs(t, err, &pe)
	require.True(t, strings.Contains(pe.Hint, "x.python"), pe.Hint)
}

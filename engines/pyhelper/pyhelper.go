// Package pyhelper runs spade's embedded Python helper scripts (the SBERT
// embedder of engines/metrics, the experiment-tracker logger of
// engines/track) with a user-named interpreter, normally the pinned
// virtual environment's (`make venv`): the script is written to a fresh
// temporary directory, the request goes in on stdin and the reply comes
// back on stdout. One place decides how a helper's failure is reported,
// so every helper names its interpreter, its setting and its stderr the
// same way.
package pyhelper

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Script is one embedded helper: its file name (which its errors name)
// and its source.
type Script struct {
	// Name is the file name the script is written under, e.g.
	// "sbert_embed.py".
	Name string
	// Source is the script's text (a //go:embed of the file).
	Source []byte
}

// Call is one run of a Script.
type Call struct {
	// Python is the interpreter to run (a path or a name on PATH).
	Python string
	// Setting is the config key that names Python (e.g. "metrics.python"),
	// quoted in the hint of an error that looks like a missing interpreter
	// or package.
	Setting string
	// Stdin is the request written to the script's standard input.
	Stdin []byte
	// Env is added to the process's environment (KEY=VALUE entries).
	Env []string
	// StderrTail bounds the stderr an error carries, in bytes (the last
	// StderrTail bytes, prefixed with "..."); 0 keeps all of it.
	StderrTail int
}

// Error is Run's error for a script that did not exit 0: the exec error,
// the hint (empty or " (SETTING must be the pinned venv's interpreter:
// run `make venv`)" when the interpreter or a module was not found) and
// the tail of its stderr. Callers wrap its parts into their own message.
type Error struct {
	// Err is the error of exec.Cmd.Run (*exec.ExitError, exec.ErrNotFound, ...).
	Err error
	// Hint is empty or a parenthesised hint with a leading space.
	Hint string
	// Stderr is the trimmed tail of the script's standard error.
	Stderr string
}

// Error returns the exec error, the hint and the stderr tail.
func (e *Error) Error() string { return e.Err.Error() + e.Hint + ": " + e.Stderr }

// Unwrap returns the exec error.
func (e *Error) Unwrap() error { return e.Err }

// Run writes s to a temporary directory, runs it with c.Python and returns
// its standard output. Errors: the temporary directory's (os), ctx.Err()
// when ctx ended the run, else *Error when the script failed.
func Run(ctx context.Context, s Script, c Call) ([]byte, error) {
	dir, err := os.MkdirTemp("", "spade-"+strings.TrimSuffix(s.Name, ".py")+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, s.Name)
	if err := os.WriteFile(path, s.Source, 0o644); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, c.Python, path)
	cmd.Stdin = bytes.NewReader(c.Stdin)
	cmd.Env = append(os.Environ(), c.Env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		msg := strings.TrimSpace(stderr.String())
		if c.StderrTail > 0 && len(msg) > c.StderrTail {
			msg = "..." + msg[len(msg)-c.StderrTail:]
		}
		hint := ""
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist) || strings.Contains(msg, "No module named") {
			hint = " (" + c.Setting + " must be the pinned venv's interpreter: run `make venv`)"
		}
		return nil, &Error{Err: err, Hint: hint, Stderr: msg}
	}
	return stdout.Bytes(), nil
}

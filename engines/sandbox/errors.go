package sandbox

import (
	"errors"
	"fmt"
)

// Kind names why a sandboxed call failed, so a caller (the validate and
// rollout stages) can record the cause on the row instead of a bare message.
type Kind string

// Failure kinds. Kinds reported by the harness (exception, syntax, no_class,
// contract, memory, recursion, file_size, exit) come from inside the sandbox;
// the rest are decided by the Go side, which owns every deadline and limit.
// An error reply of any kind the harness does not send (a program can
// rewrite the harness in its own process) is reported as KindProtocol.
const (
	// KindTimeout: a call ran past its wall-clock timeout; the whole sandbox
	// was SIGKILLed.
	KindTimeout Kind = "timeout"
	// KindCPUTime: the episode process hit RLIMIT_CPU (SIGXCPU or SIGKILL).
	KindCPUTime Kind = "cpu_time"
	// KindMemory: an allocation failed under RLIMIT_AS (MemoryError).
	KindMemory Kind = "memory"
	// KindRecursion: RecursionError escaped the environment.
	KindRecursion Kind = "recursion"
	// KindFileSize: a write hit RLIMIT_FSIZE or the tmpfs size (EFBIG).
	KindFileSize Kind = "file_size"
	// KindCrash: a process died from a signal (SIGSEGV, SIGABRT, SIGKILL from
	// outside the harness, ...), or the whole sandbox vanished.
	KindCrash Kind = "crash"
	// KindExit: the environment called sys.exit or os._exit mid-call.
	KindExit Kind = "exit"
	// KindProtocol: a malformed or unexpected frame on the reply channel.
	KindProtocol Kind = "protocol"
	// KindOutputLimit: stdout+stderr passed Config.OutputBytes; the sandbox
	// was killed.
	KindOutputLimit Kind = "output_limit"
	// KindReplyLimit: one reply passed Config.ReplyBytes.
	KindReplyLimit Kind = "reply_limit"
	// KindException: the environment raised an ordinary exception.
	KindException Kind = "exception"
	// KindSyntax: the program does not compile.
	KindSyntax Kind = "syntax"
	// KindNoClass: class discovery failed (none, or more than one candidate).
	KindNoClass Kind = "no_class"
	// KindContract: reset/step returned the wrong shape or types.
	KindContract Kind = "contract"
	// KindCanceled: the caller's context ended; the sandbox was killed.
	KindCanceled Kind = "canceled"
	// KindSandbox: the sandbox itself could not start or misbehaved
	// (bwrap failure, fork failure); not the environment's fault.
	KindSandbox Kind = "sandbox"
)

// Error is the one error type sandbox calls return for failures of the
// environment or of its sandbox. Use errors.As or KindOf to branch on Kind.
type Error struct {
	// Kind names the cause.
	Kind Kind
	// Op is the call that failed: "start", "load", "reset", "step",
	// "tool_status" or "close".
	Op string
	// Detail is a one-line description (exception type and message, exit
	// status, limit that was hit); at most 4,000 bytes when it comes from
	// the harness.
	Detail string
	// Traceback is the tail of the Python traceback, when there is one
	// (at most 4,000 bytes).
	Traceback string
	// Output is the head of the sandbox's captured stdout and stderr, for
	// diagnosis (at most Config.OutputBytes), as valid UTF-8: invalid
	// bytes the program printed are replaced by U+FFFD.
	Output string
	// Err is the underlying Go error, if any (context errors included).
	Err error
}

// Error implements error.
func (e *Error) Error() string {
	msg := fmt.Sprintf("sandbox %s: %s", e.Op, e.Kind)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	if e.Err != nil && e.Detail == "" {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the underlying Go error (for errors.Is(err, context.Canceled)).
func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the Kind of a sandbox error in err's chain, or "" when err
// is nil or not a sandbox error.
func KindOf(err error) Kind {
	var se *Error
	if errors.As(err, &se) {
		return se.Kind
	}
	return ""
}

// Sentinel errors for misuse of the API (not failures of an environment).
var (
	// ErrNoIsolation is returned by New when Config.Strict is set and
	// bubblewrap is missing or cannot create namespaces here.
	ErrNoIsolation = errors.New("sandbox: bubblewrap isolation unavailable and Strict is set")
	// ErrForeignProc is returned by New when /proc is not the proc file
	// system of this process's PID namespace (a PID namespace entered
	// without mounting its own /proc: `unshare --pid --fork` without
	// --mount-proc) and the sandbox would need it: bubblewrap, or slot uids
	// whose processes are found through /proc and signalled.
	ErrForeignProc = errors.New("sandbox: /proc is not this PID namespace's")
	// ErrClosed is returned by calls on a closed Sandbox or Program, or on a
	// Program whose sandbox was killed (after a timeout, for example).
	ErrClosed = errors.New("sandbox: closed")
	// ErrEpisodeOpen is returned by Program.Reset while an earlier episode of
	// the same program is still open (one episode at a time per program).
	ErrEpisodeOpen = errors.New("sandbox: an episode of this program is still open")
	// ErrEpisodeOver is returned by Episode.Step after the episode
	// terminated, was truncated or its process ended.
	ErrEpisodeOver = errors.New("sandbox: episode is over")
)

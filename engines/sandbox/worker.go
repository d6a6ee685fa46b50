package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/spade-pipeline/spade/internal/textcut"
)

// worker is one sandbox (bwrap + python). Under bubblewrap it is a zygote
// that serves programs one after another, each in a fresh forked process
// (see spade_harness.py); otherwise the harness process itself serves one
// program. Calls on a worker are serialised by its owner: the Program using
// it, or the Sandbox while its slot is free.
type worker struct {
	sb     *Sandbox
	slot   int
	uid    int  // -1 when not switching uid
	zygote bool // serves several programs through spawn and reap

	cmd  *exec.Cmd
	reqW *os.File // our end of the child's fd 3 (program requests)
	repR *os.File // our end of the child's fd 4 (program replies)
	ctlW *os.File // our end of the zygote's fd 5 (control requests)
	ctlR *os.File // our end of the zygote's fd 6 (control replies)
	out  *capWriter
	done chan struct{} // closed when cmd.Wait returns

	wbuf []byte
	rbuf []byte

	served  int   // programs spawned so far
	progErr error // set once the current program's process has ended

	mu      sync.Mutex
	reason  Kind   // first kill reason; "" while alive or on natural exit
	detail  string // why it was killed
	waitErr error
	killed  bool
}

// filterPipe returns the read end of a pipe that holds filter and then
// EOF, for bwrap --seccomp (the filter is far below a pipe's capacity).
func filterPipe(filter []byte) (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	_, err = w.Write(filter)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// procAttr is how a sandbox process is started: its own process group
// (so the group can be killed whole), SIGKILL when spade dies, and, for
// uid >= 0, that uid and gid with no supplementary groups.
func procAttr(uid int) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if uid >= 0 {
		attr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}
	}
	return attr
}

// startWorker launches the harness for slot and waits for its ready frame.
func (s *Sandbox) startWorker(ctx context.Context, slot int) (*worker, error) {
	reqR, reqW, err := os.Pipe()
	if err != nil {
		return nil, &Error{Kind: KindSandbox, Op: "start", Detail: "create request pipe", Err: err}
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		reqR.Close()
		reqW.Close()
		return nil, &Error{Kind: KindSandbox, Op: "start", Detail: "create reply pipe", Err: err}
	}
	w := &worker{sb: s, slot: slot, uid: s.slotUID(slot), zygote: s.zygote, reqW: reqW, repR: repR, done: make(chan struct{})}
	extra := []*os.File{reqR, repW} // fds 3 and 4 in the child
	if w.zygote {
		var ctlR, ctlW *os.File
		if ctlR, w.ctlW, err = os.Pipe(); err == nil {
			if w.ctlR, ctlW, err = os.Pipe(); err != nil {
				ctlR.Close()
				w.ctlW.Close()
			}
		}
		if err != nil {
			for _, f := range []*os.File{reqR, reqW, repR, repW} {
				f.Close()
			}
			return nil, &Error{Kind: KindSandbox, Op: "start", Detail: "create control pipes", Err: err}
		}
		extra = append(extra, ctlR, ctlW) // fds 5 and 6
	}
	w.out = &capWriter{limit: s.cfg.OutputBytes, onExceed: func(int64) {
		w.kill(KindOutputLimit, fmt.Sprintf("stdout+stderr passed %d bytes", s.cfg.OutputBytes))
	}}
	seccompFD := -1
	if s.isolation == IsolationBwrap {
		if filter := keyringFilter(); filter != nil {
			r, err := filterPipe(filter)
			if err != nil {
				for _, f := range append(extra, reqW, repR, w.ctlW, w.ctlR) {
					if f != nil {
						f.Close()
					}
				}
				return nil, &Error{Kind: KindSandbox, Op: "start", Detail: "pass the seccomp filter", Err: err}
			}
			extra = append(extra, r)
			seccompFD = 2 + len(extra) // ExtraFiles[i] is fd 3+i in the child
		}
	}
	argv := s.argv(seccompFD)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = s.childEnv()
	cmd.Dir = "/"
	cmd.Stdin = nil
	cmd.Stdout = w.out
	cmd.Stderr = w.out
	cmd.ExtraFiles = extra
	cmd.WaitDelay = 2 * time.Second
	cmd.SysProcAttr = procAttr(w.uid)
	w.cmd = cmd
	if err := cmd.Start(); err != nil {
		for _, f := range append(extra, reqW, repR, w.ctlW, w.ctlR) {
			if f != nil {
				f.Close()
			}
		}
		return nil, &Error{Kind: KindSandbox, Op: "start", Detail: "start " + argv[0], Err: err}
	}
	for _, f := range extra {
		f.Close()
	}
	go func() {
		err := cmd.Wait()
		w.mu.Lock()
		w.waitErr = err
		w.mu.Unlock()
		close(w.done)
	}()
	var r *reply
	if w.zygote {
		r, err = w.ctl(ctx, "start", nil, s.cfg.LoadTimeout)
	} else {
		r, err = w.roundTrip(ctx, "start", nil, s.cfg.LoadTimeout)
	}
	if err != nil {
		w.close()
		return nil, err
	}
	if !r.Ready {
		w.close()
		detail := "harness did not report ready"
		if r.Detail != "" {
			detail += ": " + r.Detail // it refused to serve (e.g. it could not leave the host's keyrings)
		}
		return nil, &Error{Kind: KindSandbox, Op: "start", Detail: detail, Output: w.out.head(outputInError)}
	}
	return w, nil
}

// call sends req to the current program and returns the next reply, under
// timeout and ctx. Once the zygote reports that the program's process ended
// (os._exit, a signal, RLIMIT_CPU), every call returns that error.
func (w *worker) call(ctx context.Context, op string, req any, timeout time.Duration) (*reply, error) {
	if w.progErr != nil {
		return nil, w.progErr
	}
	r, err := w.roundTrip(ctx, op, req, timeout)
	if err == nil && r.Op == "program_ended" {
		w.progErr = processEndedError(op, "program process", r, w)
		return nil, w.progErr
	}
	return r, err
}

// ctl is one exchange with the zygote on its control channel (fds 5/6),
// which no program process holds.
func (w *worker) ctl(ctx context.Context, op string, req any, timeout time.Duration) (*reply, error) {
	return w.exchange(ctx, op, req, timeout, w.ctlW, w.ctlR, 64<<10)
}

// roundTrip is one exchange on the program channel (fds 3/4).
func (w *worker) roundTrip(ctx context.Context, op string, req any, timeout time.Duration) (*reply, error) {
	return w.exchange(ctx, op, req, timeout, w.reqW, w.repR, w.sb.cfg.ReplyBytes)
}

// exchange writes req (unless nil) to wr and reads one reply frame from rd.
// Any failure other than an error reply from the harness kills the sandbox:
// after a timeout or a garbled frame its state is unknown.
func (w *worker) exchange(ctx context.Context, op string, req any, timeout time.Duration, wr, rd *os.File, limit int) (*reply, error) {
	if w.isKilled() {
		return nil, w.deadError(op)
	}
	deadline := time.Now().Add(timeout)
	ctxDeadline := false
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline, ctxDeadline = d, true
	}
	stop := context.AfterFunc(ctx, func() {
		// Wake a blocked read or write; the error path below sees ctx.Err.
		_ = rd.SetReadDeadline(time.Unix(1, 0))
		_ = wr.SetWriteDeadline(time.Unix(1, 0))
	})
	defer stop()
	if req != nil {
		payload, err := json.Marshal(req)
		if err != nil {
			return nil, &Error{Kind: KindProtocol, Op: op, Detail: "encode request", Err: err}
		}
		w.wbuf = appendFrame(w.wbuf[:0], payload)
		if err := wr.SetWriteDeadline(deadline); err != nil {
			return nil, w.fail(ctx, op, err, timeout, ctxDeadline)
		}
		if _, err := wr.Write(w.wbuf); err != nil {
			return nil, w.fail(ctx, op, err, timeout, ctxDeadline)
		}
	}
	if err := rd.SetReadDeadline(deadline); err != nil {
		return nil, w.fail(ctx, op, err, timeout, ctxDeadline)
	}
	payload, buf, err := readFrame(rd, w.rbuf, limit)
	w.rbuf = buf
	if err != nil {
		return nil, w.fail(ctx, op, err, timeout, ctxDeadline)
	}
	r, err := decodeReply(payload)
	if err != nil {
		w.kill(KindProtocol, err.Error())
		return nil, &Error{Kind: KindProtocol, Op: op, Detail: err.Error(), Output: w.out.head(outputInError)}
	}
	return r, nil
}

// fail turns an I/O error on the channel into a typed error, killing the
// sandbox first.
func (w *worker) fail(ctx context.Context, op string, err error, timeout time.Duration, ctxDeadline bool) error {
	switch {
	case ctx.Err() != nil || (ctxDeadline && errors.Is(err, os.ErrDeadlineExceeded)):
		cerr := ctx.Err()
		if cerr == nil {
			cerr = context.DeadlineExceeded // the read deadline fired a hair before ctx's timer
		}
		w.kill(KindCanceled, "context ended")
		return &Error{Kind: KindCanceled, Op: op, Detail: cerr.Error(), Err: cerr}
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.kill(KindTimeout, fmt.Sprintf("no reply within %s", timeout))
		return &Error{Kind: KindTimeout, Op: op, Detail: fmt.Sprintf("no reply within %s; sandbox killed", timeout), Output: w.out.head(outputInError)}
	case errors.Is(err, errFrameTooLarge):
		w.kill(KindReplyLimit, err.Error())
		return &Error{Kind: KindReplyLimit, Op: op, Detail: err.Error(), Output: w.out.head(outputInError)}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.EPIPE):
		// The process went away: wait for its status to name the cause.
		select {
		case <-w.done:
		case <-time.After(2 * time.Second):
			w.kill(KindCrash, "reply channel closed")
		}
		return w.deadError(op)
	default:
		w.kill(KindProtocol, err.Error())
		return &Error{Kind: KindProtocol, Op: op, Detail: err.Error(), Err: err, Output: w.out.head(outputInError)}
	}
}

// deadError describes a worker that is no longer usable.
func (w *worker) deadError(op string) error {
	w.mu.Lock()
	reason, detail, werr := w.reason, w.detail, w.waitErr
	w.mu.Unlock()
	if reason != "" {
		if reason == KindCanceled || reason == KindTimeout {
			return &Error{Kind: reason, Op: op, Detail: "sandbox was killed earlier: " + detail, Err: ErrClosed}
		}
		return &Error{Kind: reason, Op: op, Detail: detail, Output: w.out.head(outputInError)}
	}
	select {
	case <-w.done:
	default:
		return &Error{Kind: KindCrash, Op: op, Detail: "reply channel closed", Output: w.out.head(outputInError)}
	}
	out := w.out.head(outputInError)
	kind, det := KindCrash, "sandbox exited"
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok {
			kind, det = classifyStatus(ws, out)
		}
	} else if werr == nil {
		kind, det = KindExit, "sandbox exited with status 0"
	}
	return &Error{Kind: kind, Op: op, Detail: det, Output: out}
}

// classifyStatus names the cause of a process's end from its wait status.
// bwrap reports the sandboxed command's exit code as its own; a command
// killed by a signal shows as exit 128+signal.
func classifyStatus(ws syscall.WaitStatus, output string) (Kind, string) {
	sig := syscall.Signal(-1)
	switch {
	case ws.Signaled():
		sig = ws.Signal()
	case ws.Exited() && ws.ExitStatus() > 128 && ws.ExitStatus() < 128+65:
		sig = syscall.Signal(ws.ExitStatus() - 128)
	case ws.Exited():
		return KindExit, "sandbox exited with status " + strconv.Itoa(ws.ExitStatus())
	}
	return signalKind(sig, output)
}

// signalKind maps a terminating signal to a Kind.
func signalKind(sig syscall.Signal, output string) (Kind, string) {
	det := "killed by signal " + signalName(sig)
	switch {
	case sig == syscall.SIGXCPU:
		return KindCPUTime, det + " (RLIMIT_CPU)"
	case sig == syscall.SIGXFSZ:
		return KindFileSize, det + " (RLIMIT_FSIZE)"
	case strings.Contains(output, "MemoryError") || strings.Contains(output, "Cannot allocate memory"):
		return KindMemory, det + " after a failed allocation"
	}
	return KindCrash, det
}

func (w *worker) isKilled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.killed
}

// kill SIGKILLs the whole sandbox: bwrap's process group, which takes the
// pid namespace (and every process inside, daemons included) with it. The
// first reason recorded wins. Safe to call from any goroutine, repeatedly.
func (w *worker) kill(reason Kind, detail string) {
	w.mu.Lock()
	if !w.killed {
		w.killed = true
		w.reason, w.detail = reason, detail
	}
	w.mu.Unlock()
	if p := w.cmd.Process; p != nil {
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
		_ = p.Kill()
	}
	if w.uid >= 0 {
		killUID(w.uid)
	}
}

// close ends the worker: a polite "exit" is not worth a round trip here, the
// harness holds no state worth saving, so it is killed; then the slot's uid is
// swept until no process of it remains, so the next program in this slot
// starts clean.
func (w *worker) close() {
	w.signalClose()
	w.wait()
	if w.uid >= 0 {
		sweepUIDs([]int{w.uid}, 5*time.Second)
	}
}

// signalClose marks the worker closed (unless it was killed for a reason
// already) and SIGKILLs the sandbox without waiting for it: close's first
// half, which closeWorkers sends to every worker before waiting for any.
func (w *worker) signalClose() {
	w.mu.Lock()
	if !w.killed {
		w.killed = true
		w.reason, w.detail = "", "closed"
	}
	w.mu.Unlock()
	if p := w.cmd.Process; p != nil {
		_ = syscall.Kill(-p.Pid, syscall.SIGKILL)
		_ = p.Kill()
	}
}

// wait waits for the killed sandbox to exit and closes our ends of its
// channels; the slot's uid is not swept.
func (w *worker) wait() {
	<-w.done
	for _, f := range []*os.File{w.reqW, w.repR, w.ctlW, w.ctlR} {
		if f != nil {
			f.Close()
		}
	}
}

// closeWorkers closes ws as close does, but kills them all before waiting
// for any and sweeps their uids together: one scan of /proc per sweep
// round for all of them instead of one per worker, which at hundreds of
// slots (and three processes per slot in /proc) made closing a sandbox
// cost more CPU than starting it (docs/benchmarks.md section 7).
func closeWorkers(ws []*worker) {
	for _, w := range ws {
		w.signalClose()
	}
	var uids []int
	for _, w := range ws {
		w.wait()
		if w.uid >= 0 {
			uids = append(uids, w.uid)
		}
	}
	if len(uids) > 0 {
		sweepUIDs(uids, 5*time.Second)
	}
}

// spawn has the zygote fork a fresh program process, which then serves the
// program channel. The program channel is drained first: frames a previous
// program left in the pipe (its processes are all dead by now) must not be
// read as this program's replies.
func (w *worker) spawn(ctx context.Context) error {
	w.progErr = nil
	if err := w.drainReplies(); err != nil {
		w.kill(KindSandbox, "drain program channel: "+err.Error())
		return &Error{Kind: KindSandbox, Op: "load", Detail: "drain program channel", Err: err}
	}
	w.out.reset()
	r, err := w.ctl(ctx, "load", map[string]string{"op": "spawn"}, w.sb.cfg.LoadTimeout)
	if err != nil {
		return err
	}
	if !r.OK {
		w.kill(KindSandbox, "spawn refused: "+r.Detail)
		return harnessError("load", r)
	}
	w.served++
	return nil
}

// replyWaiting reports whether the program reply pipe is readable (a
// frame, or end of file) without reading it; poll(2) with a zero timeout.
// Between calls nothing is expected there, so anything is the zygote's
// unsolicited report that the program process ended. An error of the
// poll counts as readable: the caller then treats the program as gone.
func (w *worker) replyWaiting() bool {
	rc, err := w.repR.SyscallConn()
	if err != nil {
		return true
	}
	waiting := false
	err = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, 0)
			if err == unix.EINTR {
				continue
			}
			waiting = err != nil || (n > 0 && fds[0].Revents != 0)
			return
		}
	})
	return waiting || err != nil
}

// drainReplies discards whatever is buffered in the program reply pipe,
// reading the non-blocking descriptor directly until it would block (a
// read deadline in the past would make os.File refuse to read at all).
func (w *worker) drainReplies() error {
	rc, err := w.repR.SyscallConn()
	if err != nil {
		return err
	}
	var rerr error
	buf := make([]byte, 64<<10)
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, err := syscall.Read(int(fd), buf)
			switch {
			case err == syscall.EINTR:
				continue
			case err == syscall.EAGAIN:
				return true
			case err != nil:
				rerr = err
				return true
			case n == 0:
				rerr = io.EOF
				return true
			}
		}
	})
	if err != nil {
		return err
	}
	return rerr
}

// reap ends the current program: the zygote SIGKILLs its process, kills and
// reaps every other process of the sandbox, empties /tmp and /dev/shm and
// checks /dev. It reports whether the sandbox is clean enough to serve
// another program; on false or any error the caller closes the worker.
func (w *worker) reap(ctx context.Context) (clean, strays bool) {
	r, err := w.ctl(ctx, "close", map[string]string{"op": "reap"}, w.sb.cfg.LoadTimeout)
	if err != nil {
		return false, false
	}
	if !r.OK || !r.Clean {
		w.sb.cfg.Logger.Debug("sandbox not reusable after a program", "slot", w.slot, "unclean", r.Unclean)
	}
	return r.OK && r.Clean, r.Strays
}

// capWriter keeps the first limit bytes of the sandbox's stdout+stderr and
// calls onExceed once when more arrive; it never blocks the writer, so a
// chatty environment cannot stall on a full pipe while we wait for a reply.
type capWriter struct {
	mu       sync.Mutex
	buf      bytes.Buffer
	total    int64
	limit    int64
	fired    bool
	onExceed func(total int64)
}

func (c *capWriter) Write(p []byte) (int, error) {
	c.mu.Lock()
	room := c.limit - int64(c.buf.Len())
	if room > 0 {
		if int64(len(p)) < room {
			room = int64(len(p))
		}
		c.buf.Write(p[:room])
	}
	c.total += int64(len(p))
	fire := c.total > c.limit && !c.fired
	if fire {
		c.fired = true
	}
	total := c.total
	c.mu.Unlock()
	if fire && c.onExceed != nil {
		c.onExceed(total)
	}
	return len(p), nil
}

// reset forgets the captured output and its count, for the next program of
// a reused sandbox: the output cap is per program.
func (c *capWriter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Reset()
	c.total, c.fired = 0, false
}

// outputInError is how much captured output an Error carries.
const outputInError = 4096

// head returns up to n bytes of the captured output, cut at a character
// boundary, as valid UTF-8: each run of invalid bytes a program printed
// becomes U+FFFD, so the text can go into Parquet string columns.
func (c *capWriter) head(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.ToValidUTF8(textcut.Prefix(c.buf.String(), n), "\uFFFD")
}

// signalName is the conventional SIGxxx name (Signal.String gives prose).
func signalName(sig syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
		syscall.SIGILL: "SIGILL", syscall.SIGKILL: "SIGKILL", syscall.SIGSEGV: "SIGSEGV",
		syscall.SIGTERM: "SIGTERM", syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ",
		syscall.SIGPIPE: "SIGPIPE", syscall.SIGALRM: "SIGALRM", syscall.SIGINT: "SIGINT",
		syscall.SIGHUP: "SIGHUP", syscall.SIGUSR1: "SIGUSR1", syscall.SIGUSR2: "SIGUSR2",
	}
	if n, ok := names[sig]; ok {
		return n
	}
	return "signal " + strconv.Itoa(int(sig))
}

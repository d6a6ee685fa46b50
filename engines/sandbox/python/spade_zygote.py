"""The zygote of a sandbox that serves many programs (spade_harness.py
runs it when its limits say "zygote"): it forks one program process per
program from a warm interpreter, reaps it, and cleans up between programs
(spade_isolation.cleanup) before it reports the program ended on its
control channel. Harness names (read_frame, send, program_main, LIMITS, ...)
are looked up through the module at call time, so a test that patches
spade_harness patches what the zygote calls."""

import _signal
import gc
import os
import resource
import select
import signal
import sys

import spade_harness as _h
import spade_isolation
from spade_isolation import CTL_IN_FD, CTL_OUT_FD, cleanup, ctl_send, dev_snapshot, reset_times, shared_inodes


def send_if_room(obj):
    """_h.send() that never blocks: a program's daemon may have filled the
    reply pipe before it was killed. If the frame does not fit, Go learns
    the program's end from the reap reply instead (and a partly written
    frame is drained before the next program, or fails the current read as
    a protocol error, which replaces the sandbox)."""
    os.set_blocking(_h.OUT_FD, False)
    try:
        _h.send(obj)
    except BlockingIOError:
        pass
    finally:
        os.set_blocking(_h.OUT_FD, True)


def reap_children(child_pid):
    """Reap every exited child without blocking: orphans reparented to this
    init and, when it has exited, the program process. Returns the program
    process's wait status, or None while it runs."""
    status = None
    while True:
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == child_pid:
            status = st


def zygote_main():
    import select

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Import once here what every program process needs, so no program
    # process pays for it.
    import inspect  # noqa: F401  (tool_status)
    import linecache  # noqa: F401  (op_load)
    import traceback  # noqa: F401  (tail_traceback)

    import spade_env  # noqa: F401  (discover, metadata)

    # Not dumpable: a program process running as the same uid cannot ptrace
    # this process or write its memory through /proc. (main loaded LIBC
    # before detach_keyrings let the zygote start.)
    spade_isolation.LIBC.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    # SIGCHLD wakes the select below through a pipe: exited processes are
    # reaped at once, so orphans never pile up as zombies against
    # RLIMIT_NPROC while a program runs.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    for fd in (_h.IN_FD, _h.OUT_FD):
        os.set_inheritable(fd, True)
    shared = shared_inodes()
    reset_times(shared)  # so a fresh sandbox looks like a restored one
    dev = dev_snapshot()
    ctl_send({"ok": True, "ready": True, "python": sys.version.split()[0]})
    child = 0  # the program process's pid, 0 when none runs
    ended = None  # the report of a program process that ended by itself
    while True:
        ready, _, _ = select.select([CTL_IN_FD, wake_r], [], [])
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
            status = reap_children(child)
            if child and status is not None:
                # The program process ended by itself: report it on the
                # program channel, where the Go side waits for a reply,
                # once its strays are gone.
                child = 0
                strays, problems = cleanup(dev, shared)
                ended = dict(_h.status_fields(status), strays=strays, unclean=problems)
                send_if_room(dict({"op": "program_ended"}, **_h.status_fields(status)))
        if CTL_IN_FD not in ready:
            continue
        try:
            req = _h.read_frame(CTL_IN_FD)
        except EOFError:
            return
        op = req.get("op")
        if op == "spawn":
            if child:
                ctl_send({"ok": False, "kind": "protocol", "detail": "a program is already running"})
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            gc.freeze()  # as in op_reset: the child's collector leaves these pages alone
            try:
                pid = os.fork()
            except OSError as exc:
                ctl_send({"ok": False, "kind": "sandbox", "detail": f"fork program process: {exc}"})
                continue
            if pid == 0:

                def program_process():
                    # The _signal functions, not the signal module's
                    # wrappers: those convert to and from enum members,
                    # whose machinery touches ~30 more pages of the zygote
                    # in every program process (docs/benchmarks.md).
                    _signal.set_wakeup_fd(-1)
                    _signal.signal(_signal.SIGCHLD, _signal.SIG_DFL)
                    _signal.signal(_signal.SIGINT, _signal.default_int_handler)
                    for fd in (CTL_IN_FD, CTL_OUT_FD, wake_r, wake_w):
                        os.close(fd)
                    cpu = _h.LIMITS.get("cpu_seconds")
                    if cpu:
                        resource.setrlimit(resource.RLIMIT_CPU, (cpu, _h.cpu_hard(cpu)))
                    _h.program_main(False)

                _h.child_main(program_process)
            child, ended = pid, None
            ctl_send({"ok": True})
        elif op == "reap":
            if child:
                try:
                    os.kill(child, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                while True:
                    try:
                        _, status = os.waitpid(child, 0)
                        break
                    except InterruptedError:
                        continue
                child = 0
                strays, problems = cleanup(dev, shared)
                ended = dict(_h.status_fields(status), strays=strays, unclean=problems)
            report = ended or {"strays": False, "unclean": []}
            ctl_send(dict({"ok": True, "clean": not report["unclean"]}, **report))
            ended = None
        elif op == "exit":
            return
        else:
            ctl_send({"ok": False, "kind": "protocol", "detail": f"unknown op {op!r}"})

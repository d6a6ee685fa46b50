"""The sandbox's isolation work, beside the harness (spade_harness.py):
what a sandbox must not inherit (descriptors, the host's keyrings), run
once at start, and the zygote's cleanup between programs (processes,
files, inodes, IPC objects, descriptor and device state), with the
zygote's control channel. Stdlib only, like the harness. It reads the
harness's framing (dumps, write_all, HEADER, IN_FD) and LIMITS through the
module at call time: the harness imports this module while it is itself
being imported (spade_run.py), so those names are looked up late."""

import fcntl
import os
import resource
import signal

import spade_harness as _h

LIBC = None  # ctypes handle on the C library, loaded by detach_keyrings


# --- what a sandbox must not inherit ----------------------------------------
#
# Run once at start, before any program code: a process keeps what its
# parent had, and bubblewrap's namespaces do not cover these two.

# keyctl's syscall number by machine (asm-generic 219: arm64, riscv64,
# loongarch64); others refuse to start a sandbox rather than leave the
# host's keyrings reachable.
KEYCTL_NR = {
    "x86_64": 250, "i686": 288, "i386": 288, "aarch64": 219, "riscv64": 219, "loongarch64": 219,
    "armv7l": 311, "armv8l": 311, "ppc64le": 271, "ppc64": 271, "s390x": 280,
}.get(os.uname().machine)
KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_CLEAR = 1, 7
KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING = -3, -4, -5
KEYRINGS = False  # whether keyctl works here (then cleanup clears the keyrings)


def close_inherited_fds(last):
    """Close every descriptor above last. The Go side passes 0-4 (and 5-6
    to a zygote), but a descriptor the spade process inherited without
    close-on-exec (a shell redirection, a jobserver pipe, a socket from
    systemd) survives the exec into bubblewrap and Python and would hand a
    program a host file or directory."""
    try:
        # Exactly the open ones, whatever their number (one may lie above a
        # lowered RLIMIT_NOFILE); closing listdir's own descriptor fails
        # harmlessly.
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        fds = range(last + 1, max(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 1024))
    for fd in fds:
        if fd > last:
            try:
                os.close(fd)
            except OSError:
                pass


def keyctl(*args):
    """The keyctl(2) syscall through ctypes; (result, errno)."""
    res = LIBC.syscall(KEYCTL_NR, *args)
    return res, (ctypes_errno() if res < 0 else 0)


def ctypes_errno():
    import ctypes

    return ctypes.get_errno()


def detach_keyrings():
    """Join a new, empty session keyring and empty the slot uid's user
    keyrings (clear_keyrings). Keyrings are not namespaced: the session
    keyring of the process that started spade (a PAM login's, a systemd
    service's) is otherwise inherited, and every program could read and
    replace the host's keys in it. Under bubblewrap on amd64 and arm64 a
    seccomp filter makes keyctl fail with ENOSYS for everything in the
    sandbox, which settles it; this covers the rest. Returns an error
    text, or "" when detached or when keyctl is unavailable here."""
    global LIBC, KEYRINGS
    if LIBC is None:
        try:
            import ctypes

            LIBC = ctypes.CDLL(None, use_errno=True)
        except (ImportError, OSError):
            return "keyrings: ctypes is unavailable, so the host's session keyring cannot be left"
    if KEYCTL_NR is None:
        return f"keyrings: keyctl's syscall number on {os.uname().machine} is unknown"
    res, err = keyctl(KEYCTL_JOIN_SESSION_KEYRING, None)
    if res >= 0:
        KEYRINGS = True
        # The user keyrings belong to the uid, not to this sandbox: an
        # earlier sandbox of the same slot uid may have left keys there.
        return "" if clear_keyrings() else "keyrings: the slot uid's keyrings could not be cleared"
    if err in (38, 1):  # ENOSYS, EPERM: keyctl is filtered or absent
        return ""
    return f"keyrings: joining a new session keyring failed: {os.strerror(err)}"


def clear_keyrings():
    """Empty the keyrings a program may have added keys to: this sandbox's
    session keyring, and the uid's user and user-session keyrings when the
    uid is the slot's own ("own_uid": never the invoking user's, whose keys
    they would be). True when emptied (or keyctl is unavailable here, as
    under bubblewrap's seccomp filter on amd64 and arm64)."""
    if not KEYRINGS:
        return True
    rings = [KEY_SPEC_SESSION_KEYRING]
    if _h.LIMITS.get("own_uid"):
        rings += [KEY_SPEC_USER_KEYRING, KEY_SPEC_USER_SESSION_KEYRING]
    ok = True
    for ring in rings:
        res, _ = keyctl(KEYCTL_CLEAR, ring)
        ok = ok and res == 0
    return ok


def shared_inodes():
    """/tmp, /dev/shm, /dev and the symlinks in /dev: the inodes programs
    share and may own. Listed once at start; a changed /dev replaces the
    sandbox (dev_snapshot)."""
    paths = ["/tmp", "/dev/shm", "/dev"]
    try:
        with os.scandir("/dev") as it:
            paths += [e.path for e in it if e.is_symlink()]
    except OSError:
        pass
    return paths


def reset_times(paths):
    """Set the access and modification times of paths (shared_inodes) to
    the epoch: a program can write 64 bits of nanoseconds into each with
    utime, a channel to the next program otherwise."""
    for path in paths:
        try:
            os.utime(path, ns=(0, 0), follow_symlinks=False)
        except OSError:
            pass


def clear_xattrs(path):
    """Remove every extended attribute of path (POSIX ACLs included: a
    default ACL on /tmp would govern every file the next program creates
    there); True when none is left."""
    try:
        for name in os.listxattr(path, follow_symlinks=False):
            try:
                os.removexattr(path, name, follow_symlinks=False)
            except OSError:
                pass
        return not os.listxattr(path, follow_symlinks=False)
    except OSError as exc:
        return exc.errno == 95  # EOPNOTSUPP: the filesystem keeps none


# --- zygote ----------------------------------------------------------------
#
# With ``"zygote": true`` in the limits the harness runs as pid 1 of the
# sandbox's pid namespace (bwrap --as-pid-1) and never executes untrusted
# code itself. For each program it forks a fresh child that serves the
# program on fds 3/4 exactly as a standalone harness would; between programs
# it kills every other process of the namespace, empties /tmp and /dev/shm,
# checks /dev against its start-up snapshot and drains the request pipe, and
# reports on its own control channel (fds 5/6, closed in the child before any
# program code runs). As the namespace's init it cannot be killed from
# inside: the kernel drops SIGKILL from processes of the same namespace.
# Anything it cannot restore is reported as unclean and the Go side replaces
# the whole sandbox.

CTL_IN_FD = 5
CTL_OUT_FD = 6


def ctl_send(obj):
    data = _h.dumps(obj).encode("utf-8", "surrogatepass")
    _h.write_all(_h.HEADER.pack(len(data)) + data, CTL_OUT_FD)


def fd_state(fd):
    """What a program process can change on a file description it shares
    with the zygote: status flags (O_ASYNC, O_DIRECT, O_NONBLOCK), the
    SIGIO owner and signal, the pipe's size."""
    out = []
    for cmd in FD_QUERIES:
        try:
            out.append(fcntl.fcntl(fd, cmd))
        except OSError as exc:
            out.append(exc.errno)
    return tuple(out)


FD_QUERIES = (fcntl.F_GETFL, fcntl.F_GETOWN, fcntl.F_GETSIG, fcntl.F_GETPIPE_SZ)
RLIMITS = tuple(sorted(n for n in dir(resource) if n.startswith("RLIMIT_")))


def ioprio():
    nr = {"x86_64": 252, "aarch64": 31}.get(os.uname().machine)
    if LIBC is None or nr is None:
        return None
    return LIBC.syscall(nr, 1, 0)  # ioprio_get(IOPRIO_WHO_PROCESS, self)


def dev_snapshot():
    """Everything of the sandbox a program could change for the programs
    after it, short of the files the cleanup removes: the entries of /dev,
    the modes of /, /tmp, /dev and /dev/shm, the zygote's own rlimits,
    scheduling and I/O priority (a same-uid process may lower them with
    prlimit, sched_setscheduler, setpriority), and the state of the file
    descriptions every program shares with the zygote (fds 0-4)."""
    snap = {}
    with os.scandir("/dev") as it:
        for e in it:
            st = e.stat(follow_symlinks=False)
            snap[e.name] = (st.st_mode, st.st_rdev, st.st_ino)
    for path in ("/", "/tmp", "/dev", "/dev/shm"):
        try:
            st = os.stat(path)
            snap["stat " + path] = (st.st_mode, st.st_uid, st.st_gid, st.st_ino)
        except OSError as exc:
            snap["stat " + path] = exc.errno
        try:
            snap["xattrs " + path] = tuple(sorted(os.listxattr(path, follow_symlinks=False)))
        except OSError as exc:
            snap["xattrs " + path] = exc.errno
    for name in RLIMITS:
        snap[name] = resource.getrlimit(getattr(resource, name))
    snap["sched"] = (os.sched_getscheduler(0), os.getpriority(os.PRIO_PROCESS, 0), sorted(os.sched_getaffinity(0)), ioprio())
    for fd in range(5):
        snap[f"fd {fd}"] = fd_state(fd)
    return snap


def remove_sysv_ipc():
    """Remove the System V shared memory segments, semaphore sets and
    message queues programs created in the sandbox's IPC namespace (same
    uid, so IPC_RMID is allowed); True when none is left."""
    if LIBC is None:
        return False
    rm = {
        "shm": lambda i: LIBC.shmctl(i, 0, None),  # IPC_RMID
        "sem": lambda i: LIBC.semctl(i, 0, 0),
        "msg": lambda i: LIBC.msgctl(i, 0, None),
    }
    left = False
    for kind, fn in rm.items():
        path = "/proc/sysvipc/" + kind
        ids = [int(line.split()[1]) for line in read_small(path).splitlines()[1:]]
        for i in ids:
            fn(i)
        # Read again only when something was removed (the common case has none).
        left = left or (bool(ids) and len(read_small(path).splitlines()) > 1)
    return not left


def read_small(path):
    """The bytes of a small file (a /proc table) read with os.read: far
    fewer objects than open() and a text wrapper."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def wipe(path, top=True):
    """Remove everything below path; True when it is empty afterwards."""
    if not top:
        try:
            os.chmod(path, 0o700)  # a program may have made it unwritable
        except OSError:
            pass
    try:
        entries = list(os.scandir(path))
    except OSError:
        return False
    for e in entries:
        try:
            if e.is_dir(follow_symlinks=False):
                wipe(e.path, False)
                os.rmdir(e.path)
            else:
                os.unlink(e.path)
        except OSError:
            pass
    try:
        return not os.listdir(path)
    except OSError:
        return False


def kill_all_others():
    """SIGKILL and reap every process of the namespace but this one.

    Returns (whether any process was found, whether none is left)."""
    found = False
    for _ in range(2000):
        try:
            os.kill(-1, signal.SIGKILL)
            found = True
        except ProcessLookupError:
            return found, True
        except PermissionError:
            return found, False
        # Killed processes, and orphans reparented to this init, are reaped here.
        while True:
            try:
                pid, _ = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            except InterruptedError:
                continue
            if pid == 0:
                break
    return found, False


def drain_requests():
    os.set_blocking(_h.IN_FD, False)
    try:
        while True:
            try:
                if not os.read(_h.IN_FD, 1 << 16):
                    break
            except BlockingIOError:
                break
    finally:
        os.set_blocking(_h.IN_FD, True)


def cleanup(dev, shared):
    """Restore the sandbox after a program; returns (strays, problems). Any
    failure, even an unexpected exception (a directory nested past the
    recursion limit), is a problem: the Go side then replaces the sandbox."""
    strays, problems = False, []
    try:
        strays, none_left = kill_all_others()
        if not none_left:
            problems.append("processes survived SIGKILL")
        if not wipe("/tmp"):
            problems.append("/tmp could not be emptied")
        if os.path.isdir("/dev/shm") and not wipe("/dev/shm"):
            problems.append("/dev/shm could not be emptied")
        if not remove_sysv_ipc():
            problems.append("System V IPC objects could not be removed")
        if not clear_keyrings():
            problems.append("keyrings could not be cleared")
        for path in ("/tmp", "/dev/shm"):
            if os.path.isdir(path) and not clear_xattrs(path):
                problems.append(f"extended attributes of {path} could not be removed")
        reset_times(shared)
        now = dev_snapshot()
        changed = sorted(k for k in set(now) | set(dev) if now.get(k) != dev.get(k))
        if changed:
            problems.append("changed: " + ", ".join(changed)[:400])
        drain_requests()
    except BaseException as exc:  # noqa: BLE001  (the zygote must survive to report)
        problems.append(f"cleanup failed: {type(exc).__name__}: {exc}"[:500])
    return strays, problems

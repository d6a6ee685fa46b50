"""Sandbox harness: runs one untrusted SPADE environment program for the Go side.

Started by engines/sandbox (Go) inside bubblewrap as
``python3 -S -s -B spade_harness.py LIMITS_JSON``.  It speaks length-prefixed
JSON frames (4-byte big-endian length, then UTF-8 JSON) on two dedicated file
descriptors: requests arrive on fd 3, replies leave on fd 4.  stdout and
stderr are plain captured text, so an environment that prints cannot forge a
reply by printing.

Lifecycle (one program per process, never a second one):

  ready      harness -> Go once the interpreter is up and limits are applied
  load       compile + exec the program, discover the environment class
  reset      seed ``random`` from the reset seed, build a fresh instance,
             call reset(seed) and serve step / tool_status / close for that
             episode, in this process or (``"fork": true``) in a forked child;
             with ``"fresh": true`` the instance is of the class of a new
             execution of the program's code (fresh_class)
  ended      after the episode, with the forked child's wait status and
             whether stray processes had to be killed

Under bubblewrap the harness runs as a zygote instead (``"zygote": true``,
pid 1 of the sandbox): it forks one fresh process per program, which serves
the lifecycle above, and restores the sandbox between programs; see
``zygote_main``.

Everything the harness sends is checked again on the Go side: code in this
process is untrusted once the program has been executed.
"""

import fcntl
import gc
import json
import math
import os
import random
import resource
import signal
import struct
import sys

import _signal

IN_FD = 3
OUT_FD = 4
HEADER = struct.Struct(">I")

LIMITS = {}
MAX_REPLY = 1 << 20
LIBC = None  # ctypes handle on the C library, when ctypes loads


# --- JSON --------------------------------------------------------------------
#
# The json module's C encoder and scanner, called directly. json.dumps and
# json.loads wrap them in Python code (a new JSONEncoder per call, encoding
# detection, a regular expression for trailing whitespace) that touches many
# more objects, and in a freshly forked program process every page holding
# an object it touches (a reference count is a write) is copied once: about
# 20 microseconds a page on the benchmark machine (docs/benchmarks.md).


def _not_serialisable(o):
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


_C_ENCODER = json.encoder.c_make_encoder and json.encoder.c_make_encoder(
    None, _not_serialisable, json.encoder.encode_basestring, None, ":", ",", False, False, False
)
_SCAN = json.decoder.JSONDecoder().scan_once


def dumps(obj):
    """Compact JSON text of obj: UTF-8 characters unescaped, NaN and
    infinities refused (ValueError), no circular-reference check (a cycle
    ends in RecursionError); what json.dumps(obj, ensure_ascii=False,
    allow_nan=False, separators=(",", ":")) gives for acyclic values."""
    if _C_ENCODER is None:
        return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return "".join(_C_ENCODER(obj, 0))


def loads(data):
    """The value of one compact JSON text in UTF-8 bytes (as the Go side
    writes it); ValueError when it is not exactly one JSON value."""
    text = data.decode("utf-8")
    try:
        obj, end = _SCAN(text, 0)
    except StopIteration:
        raise ValueError("frame is not JSON") from None
    if end != len(text):
        raise ValueError(f"frame has {len(text) - end} characters after its JSON value")
    return obj


class ContractError(Exception):
    """The environment broke the reset/step contract (shape or types)."""


class ReplyLimit(Exception):
    """A reply would exceed the reply size limit."""


def read_exact(n, fd=IN_FD):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError(f"channel on fd {fd} closed")
        buf += chunk
    return bytes(buf)


def read_frame(fd=IN_FD):
    (n,) = HEADER.unpack(read_exact(4, fd))
    return loads(read_exact(n, fd))


def write_all(data, fd=OUT_FD):
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def send(obj):
    try:
        data = dumps(obj).encode("utf-8", "surrogatepass")
    except (ValueError, TypeError, RecursionError) as exc:
        data = json.dumps({"ok": False, "kind": "contract", "detail": f"reply is not JSON-serialisable: {type(exc).__name__}: {exc}"}).encode()
    if len(data) > MAX_REPLY:
        data = json.dumps(
            {"ok": False, "kind": "reply_limit", "detail": f"reply of {len(data)} bytes exceeds the {MAX_REPLY}-byte limit"}
        ).encode()
    write_all(HEADER.pack(len(data)) + data)


def tail_traceback(exc, limit=4000):
    """The traceback without the harness's own frames: only the program's."""
    import traceback

    if isinstance(exc, (ContractError, ReplyLimit)):
        return ""  # raised by the harness about a return value; no program frames
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.endswith("spade_harness.py")]
    text = "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames))
    text += "".join(traceback.format_exception_only(type(exc), exc))
    return text[-limit:]


def error_kind(exc):
    """Name the cause the Go side reports for an exception escaping user code."""
    if isinstance(exc, MemoryError):
        return "memory"
    if isinstance(exc, RecursionError):
        return "recursion"
    if isinstance(exc, (SystemExit, KeyboardInterrupt, GeneratorExit)):
        return "exit"
    if isinstance(exc, OSError) and exc.errno == 27:  # EFBIG: RLIMIT_FSIZE
        return "file_size"
    if isinstance(exc, ContractError):
        return "contract"
    if isinstance(exc, ReplyLimit):
        return "reply_limit"
    return "exception"


def fail(exc):
    send({"ok": False, "kind": error_kind(exc), "detail": f"{type(exc).__name__}: {exc}"[:2000], "traceback": tail_traceback(exc)})


def cpu_hard(cpu):
    """RLIMIT_CPU's hard limit for a program process: SIGXCPU comes at the
    soft limit (cpu seconds per episode, raised at each in-process episode),
    SIGKILL at this one, which bounds a program process that ignores SIGXCPU
    over all its episodes. The Go side's wall-clock deadline per call comes
    first in practice."""
    return cpu * 64 + 1


def apply_limits(lim):
    def setl(res, soft, hard=None):
        if soft is None or soft <= 0:
            return
        hard = soft if hard is None else hard
        try:
            resource.setrlimit(res, (soft, hard))
        except (ValueError, OSError):
            cur = resource.getrlimit(res)
            resource.setrlimit(res, (min(soft, cur[1]) if cur[1] != resource.RLIM_INFINITY else soft, cur[1]))

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    setl(resource.RLIMIT_AS, lim.get("memory_bytes"))
    cpu = lim.get("cpu_seconds")
    if cpu:
        setl(resource.RLIMIT_CPU, cpu, cpu_hard(cpu))
    setl(resource.RLIMIT_FSIZE, lim.get("file_size_bytes"))
    setl(resource.RLIMIT_NOFILE, lim.get("open_files"))
    setl(resource.RLIMIT_NPROC, lim.get("processes"))


# --- program loading -------------------------------------------------------

PROGRAM = {}


def finite_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def discover(namespace, wanted):
    import spade_env

    defined = [v for v in namespace.values() if isinstance(v, type) and v.__module__ == "spade_program"]
    if wanted:
        cls = namespace.get(wanted)
        if not isinstance(cls, type):
            raise LookupError(f"program defines no class named {wanted!r}")
        return cls
    cands = [c for c in defined if issubclass(c, spade_env.Env)]
    how = "spade_env.Env subclass"
    if not cands:
        # Duck-typed fallback for programs written without the base classes.
        cands = [c for c in defined if callable(getattr(c, "reset", None)) and callable(getattr(c, "step", None))]
        how = "class with reset and step"
    # Keep leaves only: an intermediate base class the program also defines is not the environment.
    leaves = [c for c in cands if not any(o is not c and issubclass(o, c) for o in cands)]
    if not leaves:
        raise LookupError("program defines no spade_env.Env subclass (and no class with reset and step methods)")
    if len(leaves) > 1:
        names = ", ".join(sorted(c.__name__ for c in leaves))
        raise LookupError(f"program defines {len(leaves)} candidate environment classes ({names}); exactly one {how} is required")
    return leaves[0]


def metadata(cls):
    import spade_env

    kind = "tool_use" if issubclass(cls, spade_env.ToolUseEnv) else "game"
    rr = getattr(cls, "reward_range", None)
    try:
        rr = [float(rr[0]), float(rr[1])] if rr is not None and len(rr) == 2 else None
    except (TypeError, ValueError):
        rr = None
    if rr is not None and not all(math.isfinite(x) for x in rr):
        rr = [str(x) for x in rr]
    mt = getattr(cls, "max_turns", None)
    tools = getattr(cls, "tools", None) if kind == "tool_use" else None
    try:
        dumps(tools)
    except (TypeError, ValueError, RecursionError):
        tools = repr(tools)[:2000]
    return {
        "class": cls.__name__,
        "kind": kind,
        "name": str(getattr(cls, "name", "") or "")[:200],
        "skill": str(getattr(cls, "skill", "") or "")[:200],
        "max_turns": mt if isinstance(mt, int) and not isinstance(mt, bool) else None,
        "reward_range": rr,
        "tools": tools,
        "has_step": "step" in {k for c in cls.__mro__ if c.__module__ == "spade_program" for k in vars(c)},
        "has_reset": "reset" in {k for c in cls.__mro__ if c.__module__ == "spade_program" for k in vars(c)},
    }


def op_load(req):
    source = req.get("source")
    if not isinstance(source, str):
        raise ContractError("load: source must be text")
    try:
        code = compile(source, "<env>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        send({"ok": False, "kind": "syntax", "detail": f"line {exc.lineno}: {exc.msg}", "traceback": tail_traceback(exc)})
        return
    except (ValueError, MemoryError, RecursionError) as exc:
        # ValueError: null bytes in the source. MemoryError and RecursionError:
        # a source too large or too deeply nested for the compiler.
        kind = "syntax" if isinstance(exc, ValueError) else error_kind(exc)
        send({"ok": False, "kind": kind, "detail": f"compiling the program: {type(exc).__name__}: {exc}".rstrip(": ")})
        return
    import linecache

    # Lets tracebacks quote the program's source lines.
    linecache.cache["<env>"] = (len(source), None, source.splitlines(True), "<env>")
    module = execute(code)
    try:
        cls = discover(module.__dict__, req.get("class") or "")
    except LookupError as exc:
        send({"ok": False, "kind": "no_class", "detail": str(exc)})
        return
    PROGRAM["cls"] = cls
    PROGRAM["code"] = code
    # The name the class is bound to, for fresh_class.
    PROGRAM["name"] = next((k for k, v in module.__dict__.items() if v is cls), cls.__name__)
    send({"ok": True, "meta": metadata(cls)})


def execute(code):
    """Execute the program's code as a new spade_program module, registered
    in sys.modules, with ``random`` seeded 0; return the module."""
    module = type(sys)("spade_program")
    module.__dict__.update({"__name__": "spade_program", "__builtins__": __builtins__})
    sys.modules["spade_program"] = module
    random.seed(0)
    exec(code, module.__dict__)
    return module


def fresh_class():
    """Execute the loaded program's code again, as a new spade_program
    module in this process, and return its environment class (the one bound
    to the same name). The validator replays a seed on it: what a program
    draws once at module level (os.urandom, an unseeded random.Random(),
    the clock, object addresses) is the same for every episode of one
    process but differs between program processes, so between the
    validation and the rollouts, and between two runs."""
    old = sys.modules.get("spade_program")
    try:
        module = execute(PROGRAM["code"])
    finally:
        if old is not None:
            sys.modules["spade_program"] = old
    cls = module.__dict__.get(PROGRAM["name"])
    if not isinstance(cls, type):
        raise LookupError(f"executed again, the program binds no class to {PROGRAM['name']!r}")
    return cls


def turn_limit(cls):
    mt = getattr(cls, "max_turns", 0)
    return mt if isinstance(mt, int) and not isinstance(mt, bool) and mt > 0 else 0


# --- one episode (runs in the forked child) --------------------------------


def check_reset(out):
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        n = len(out) if isinstance(out, (tuple, list)) else type(out).__name__
        raise ContractError(f"reset returned {n} values; expected 2 (observation, info)")
    obs, info = out
    if not isinstance(obs, str):
        raise ContractError(f"reset observation is {type(obs).__name__}; expected str")
    if not isinstance(info, dict):
        raise ContractError(f"reset info is {type(info).__name__}; expected dict")
    return obs, info


def check_step(out):
    if not isinstance(out, (tuple, list)) or len(out) != 5:
        n = len(out) if isinstance(out, (tuple, list)) else type(out).__name__
        raise ContractError(f"step returned {n} values; expected 5 (observation, reward, terminated, truncated, info)")
    obs, reward, terminated, truncated, info = out
    if not isinstance(obs, str):
        raise ContractError(f"step observation is {type(obs).__name__}; expected str")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise ContractError(f"step reward is {type(reward).__name__}; expected float")
    for label, v in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(v, bool):
            raise ContractError(f"step {label} is {type(v).__name__}; expected bool")
    if not isinstance(info, dict):
        raise ContractError(f"step info is {type(info).__name__}; expected dict")
    return obs, float(reward), terminated, truncated, info


def encode_reward(r):
    if math.isfinite(r):
        return r
    return "NaN" if math.isnan(r) else ("Infinity" if r > 0 else "-Infinity")


def sanitize(v, depth=0):
    """Make info JSON-safe: non-finite floats become strings, others repr."""
    if depth > 64:
        raise ContractError("info nests deeper than 64 levels")
    if isinstance(v, str) and len(v) > MAX_REPLY:
        # Fail before serialising a giant value (a 100 MB info string).
        raise ReplyLimit(f"info holds a string of {len(v)} characters; the reply limit is {MAX_REPLY} bytes")
    if isinstance(v, bool) or v is None or isinstance(v, (int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else encode_reward(v)
    if isinstance(v, dict):
        return {str(k): sanitize(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [sanitize(x, depth + 1) for x in v]
    return repr(v)[:1000]


def tool_status(env):
    """Facts the validator needs for the tool-use reset gate and impossibility screening."""
    import inspect

    import spade_env

    if not isinstance(env, spade_env.ToolUseEnv):
        return {"ok": False, "kind": "contract", "detail": "not a ToolUseEnv"}
    problems = []
    instrs = getattr(env, "_spade_instructions", [])
    texts, criteria, errors, missing = [], [], [], []
    for i, item in enumerate(instrs):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            problems.append(f"instruction {i + 1} is not a (text, criterion) pair")
            continue
        text, crit = item
        texts.append(text if isinstance(text, str) else repr(text))
        if not isinstance(text, str) or not text.strip():
            problems.append(f"instruction {i + 1} text is empty or not a string")
        if not callable(crit):
            problems.append(f"instruction {i + 1} criterion is not callable")
            criteria.append(False)
            errors.append("not callable")
            missing.append([])
            continue
        probe = KeyProbe(env.state)
        try:
            criteria.append(bool(crit(probe)))
            errors.append("")
        except Exception as exc:
            criteria.append(False)
            errors.append(f"{type(exc).__name__}: {exc}"[:500])
        missing.append(sorted(probe.missing))
    names = []
    for j, tool in enumerate(env.tools if isinstance(env.tools, list) else []):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str) or not tool.get("name").isidentifier():
            problems.append(f"tool {j + 1} has no identifier name")
            continue
        name = tool["name"]
        names.append(name)
        params = tool.get("parameters")
        if not isinstance(params, dict) or params.get("type", "object") != "object" or not isinstance(params.get("properties", {}), dict):
            problems.append(f"tool {name}: parameters is not a JSON Schema object with properties")
            continue
        if not isinstance(tool.get("description"), str) or not tool["description"].strip():
            problems.append(f"tool {name}: description is missing")
        method = getattr(env, "tool_" + name, None)
        if not callable(method):
            problems.append(f"tool {name}: no method tool_{name}")
            continue
        props = params.get("properties", {}) or {}
        required = params.get("required", []) or []
        for r in required:
            if r not in props:
                problems.append(f"tool {name}: required argument {r!r} is not in properties")
        try:
            sig = inspect.signature(method)
            sig.bind(**{k: None for k in props})
            sig.bind(**{k: None for k in required if k in props})
        except (TypeError, ValueError) as exc:
            problems.append(f"tool {name}: tool_{name} does not accept the schema's arguments ({exc})")
    if not isinstance(env.tools, list) or not env.tools:
        problems.append("tools is empty")
    sol = None
    try:
        s = env.solution()
        if s is not None:
            sol = [a if isinstance(a, str) else json.dumps(a) for a in s]
    except Exception as exc:
        problems.append(f"solution() raised {type(exc).__name__}: {exc}")
    return {
        "ok": True,
        "instructions": texts,
        "criteria": criteria,
        "criterion_errors": errors,
        "missing_keys": missing,
        "tools": names,
        "problems": problems,
        "solution": sol,
    }


class KeyProbe(dict):
    """A read-through view of the state that records keys read but absent.

    Criteria that read keys initial_state never defines refer to state that
    does not exist (impossibility screening).  Nested dicts are wrapped too.
    """

    def __init__(self, data, path=""):
        super().__init__(data)
        self.path = path
        self.missing = set() if not path else None
        self.root = self

    def _wrap(self, key, value):
        if isinstance(value, dict) and not isinstance(value, KeyProbe):
            child = KeyProbe(value, f"{self.path}{key}.")
            child.root = self.root
            child.missing = None
            return child
        return value

    def _note(self, key):
        self.root.missing.add(f"{self.path}{key}")

    def __getitem__(self, key):
        if not dict.__contains__(self, key):
            self._note(key)
        return self._wrap(key, dict.__getitem__(self, key))

    def get(self, key, default=None):
        if not dict.__contains__(self, key):
            self._note(key)
            return default
        return self._wrap(key, dict.__getitem__(self, key))


def serve_episode(seed, fresh):
    cls = PROGRAM["cls"]
    if fresh:
        try:
            cls = fresh_class()
        except Exception:  # noqa: BLE001
            # Module-level code that cannot run twice in one process (it
            # creates a file exclusively, say) is no fault of the program,
            # which runs it once per process: replay on the loaded class.
            cls = PROGRAM["cls"]
    try:
        max_turns = turn_limit(cls)
        random.seed(seed)
        env = cls()
        obs, info = check_reset(env.reset(seed=seed))
        if len(obs) > MAX_REPLY:
            raise ReplyLimit(f"observation of {len(obs)} characters exceeds the reply limit of {MAX_REPLY} bytes")
        send({"ok": True, "obs": obs, "info": sanitize(info)})
    except BaseException as exc:
        fail(exc)
        return
    turns = 0
    over = False
    while True:
        req = read_frame()
        op = req.get("op")
        if op == "close":
            return
        if op == "tool_status":
            try:
                send(tool_status(env))
            except BaseException as exc:
                fail(exc)
            continue
        if op != "step":
            send({"ok": False, "kind": "protocol", "detail": f"unknown episode op {op!r}"})
            continue
        action = req.get("action")
        try:
            obs, reward, terminated, truncated, info = check_step(env.step(action))
        except BaseException as exc:
            fail(exc)
            continue
        turns += 1
        forced = False
        if not over and not terminated and not truncated and max_turns and turns >= max_turns:
            truncated = True
            forced = True
        over = over or terminated or truncated
        if len(obs) > MAX_REPLY:
            fail(ReplyLimit(f"observation of {len(obs)} characters exceeds the reply limit of {MAX_REPLY} bytes"))
            continue
        try:
            info = sanitize(info)
        except BaseException as exc:
            fail(exc)
            continue
        send(
            {
                "ok": True,
                "obs": obs,
                "reward": encode_reward(reward),
                "terminated": terminated,
                "truncated": truncated,
                "forced_truncation": forced,
                "info": info,
            }
        )


def op_reset(req):
    # Every reset is answered by a reply and then an "ended" frame, even when
    # no episode process could be started, so the Go side reads a fixed shape.
    if "cls" not in PROGRAM:
        send({"ok": False, "kind": "protocol", "detail": "reset before a successful load"})
        send({"op": "ended", "exit": -1})
        return
    seed = req.get("seed")
    fresh = bool(req.get("fresh"))
    if not req.get("fork", True):
        episode_in_process(seed, fresh)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    # Move every object of the loaded program to the permanent generation
    # so that the child's garbage collector never writes to them: fewer
    # copy-on-write page faults per episode (the Python docs' advice for
    # fork servers; docs/benchmarks.md has the profile).
    gc.freeze()
    try:
        pid = os.fork()
    except OSError as exc:
        send({"ok": False, "kind": "sandbox", "detail": f"fork episode process: {exc}"})
        send({"op": "ended", "exit": -1})
        return
    if pid == 0:
        child_main(lambda: serve_episode(seed, fresh))
    _, status = os.waitpid(pid, 0)
    ended = dict({"op": "ended"}, **status_fields(status))
    if kill_strays():
        ended["strays"] = True
    send(ended)


def kill_strays():
    """Kill what an episode left running (a daemon, an unreaped child).

    Inside the sandbox's pid namespace, or under the slot's own uid,
    kill(-1) reaches exactly those processes: never pid 1 (the zygote, or
    bwrap's init) and never this process. Returns whether any was found."""
    if not LIMITS.get("reap_strays"):
        return False
    try:
        os.kill(-1, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    while True:  # reap this process's own children among them
        try:
            if os.waitpid(-1, 0)[0] == 0:
                break
        except ChildProcessError:
            break
        except InterruptedError:
            continue
    return True


def episode_in_process(seed, fresh):
    """Serve one episode in this process: a fresh instance of the loaded
    class, the same seeding as a forked episode, and the same reply frames.
    State the program keeps outside its instances (class attributes,
    module globals, threads) carries over to the next episode; the
    validator's determinism check replays seeds after other episodes to
    catch programs that depend on it."""
    cpu = LIMITS.get("cpu_seconds")
    if cpu:
        # RLIMIT_CPU counts the whole process: give each episode its own
        # budget on top of what earlier episodes used (twice for a fresh
        # one, which executes the module again first, as a load does).
        ru = resource.getrusage(resource.RUSAGE_SELF)
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        soft = int(ru.ru_utime + ru.ru_stime) + cpu * (2 if fresh else 1)
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        try:
            resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        except (ValueError, OSError):
            pass
    try:
        serve_episode(seed, fresh)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    ended = {"op": "ended", "exit": 0}
    if kill_strays():
        ended["strays"] = True
    send(ended)


def program_main(send_ready):
    """Serve one program on fds 3/4: load once, then episodes."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.set_inheritable(IN_FD, True)
    os.set_inheritable(OUT_FD, True)
    if send_ready:
        send({"ok": True, "ready": True, "python": sys.version.split()[0]})
    loaded = False
    while True:
        try:
            req = read_frame()
        except EOFError:
            return
        op = req.get("op")
        try:
            if op == "load":
                if loaded:
                    send({"ok": False, "kind": "protocol", "detail": "a sandbox serves one program only"})
                    continue
                loaded = True
                op_load(req)
            elif op == "reset":
                op_reset(req)
            elif op == "exit":
                return
            else:
                send({"ok": False, "kind": "protocol", "detail": f"unknown op {op!r}"})
        except BaseException as exc:
            fail(exc)


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
    if LIMITS.get("own_uid"):
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
    data = dumps(obj).encode("utf-8", "surrogatepass")
    write_all(HEADER.pack(len(data)) + data, CTL_OUT_FD)


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
    os.set_blocking(IN_FD, False)
    try:
        while True:
            try:
                if not os.read(IN_FD, 1 << 16):
                    break
            except BlockingIOError:
                break
    finally:
        os.set_blocking(IN_FD, True)


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


def child_main(fn):
    """Run fn in a freshly forked child and end the child, never returning:
    exit status 0 when fn returns, 70 when anything escapes it."""
    code = 0
    try:
        fn()
    except BaseException:
        code = 70
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def status_fields(status):
    out = {}
    if os.WIFEXITED(status):
        out["exit"] = os.WEXITSTATUS(status)
    elif os.WIFSIGNALED(status):
        out["signal"] = os.WTERMSIG(status)
    return out


def send_if_room(obj):
    """send() that never blocks: a program's daemon may have filled the
    reply pipe before it was killed. If the frame does not fit, Go learns
    the program's end from the reap reply instead (and a partly written
    frame is drained before the next program, or fails the current read as
    a protocol error, which replaces the sandbox)."""
    os.set_blocking(OUT_FD, False)
    try:
        send(obj)
    except BlockingIOError:
        pass
    finally:
        os.set_blocking(OUT_FD, True)


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
    LIBC.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
    # SIGCHLD wakes the select below through a pipe: exited processes are
    # reaped at once, so orphans never pile up as zombies against
    # RLIMIT_NPROC while a program runs.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    for fd in (IN_FD, OUT_FD):
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
                ended = dict(status_fields(status), strays=strays, unclean=problems)
                send_if_room(dict({"op": "program_ended"}, **status_fields(status)))
        if CTL_IN_FD not in ready:
            continue
        try:
            req = read_frame(CTL_IN_FD)
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
                    cpu = LIMITS.get("cpu_seconds")
                    if cpu:
                        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu_hard(cpu)))
                    program_main(False)

                child_main(program_process)
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
                ended = dict(status_fields(status), strays=strays, unclean=problems)
            report = ended or {"strays": False, "unclean": []}
            ctl_send(dict({"ok": True, "clean": not report["unclean"]}, **report))
            ended = None
        elif op == "exit":
            return
        else:
            ctl_send({"ok": False, "kind": "protocol", "detail": f"unknown op {op!r}"})


def main():
    global MAX_REPLY
    lim = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    LIMITS.update(lim)
    MAX_REPLY = int(lim.get("reply_bytes") or MAX_REPLY)
    close_inherited_fds(CTL_OUT_FD if lim.get("zygote") else OUT_FD)
    problem = detach_keyrings()
    if problem:
        # Refuse to serve: the Go side reports the sandbox as broken.
        out = CTL_OUT_FD if lim.get("zygote") else OUT_FD
        data = dumps({"ok": False, "kind": "sandbox", "detail": problem}).encode()
        write_all(HEADER.pack(len(data)) + data, out)
        return
    if lim.get("zygote"):
        # RLIMIT_CPU is set in each program process instead: the zygote's own
        # CPU (every fork's page-table copy) would otherwise add up to it.
        apply_limits(dict(lim, cpu_seconds=0))
        zygote_main()
        return
    apply_limits(lim)
    program_main(True)


if __name__ == "__main__":
    main()

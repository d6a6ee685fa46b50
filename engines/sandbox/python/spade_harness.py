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
``spade_zygote.zygote_main`` (the loop) and ``spade_isolation`` (what a
sandbox must not inherit, and the cleanup between programs).

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

import spade_isolation
import spade_zygote
from spade_isolation import CTL_OUT_FD, close_inherited_fds, detach_keyrings

IN_FD = 3
OUT_FD = 4
HEADER = struct.Struct(">I")

LIMITS = {}
MAX_REPLY = 1 << 20


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


# The harness's own files, whose frames a program's traceback leaves out.
HARNESS_FILES = ("spade_harness.py", "spade_isolation.py", "spade_zygote.py")


def tail_traceback(exc, limit=4000):
    """The traceback without the harness's own frames: only the program's."""
    import traceback

    if isinstance(exc, (ContractError, ReplyLimit)):
        return ""  # raised by the harness about a return value; no program frames
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.basename(f.filename) not in HARNESS_FILES]
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
        spade_zygote.zygote_main()
        return
    apply_limits(lim)
    program_main(True)


if __name__ == "__main__":
    main()

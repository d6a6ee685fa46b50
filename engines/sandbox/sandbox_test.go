package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newSandbox returns a sandbox with short limits for tests, closed at cleanup.
func newSandbox(t testing.TB, mod func(*Config)) *Sandbox {
	t.Helper()
	cfg := Config{Workers: 2, CallTimeout: 2 * time.Second, LoadTimeout: 10 * time.Second, CPUSeconds: 5}
	if mod != nil {
		mod(&cfg)
	}
	sb, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sb.Close()) })
	return sb
}

// startEpisode loads src in sb and resets it with seed 1; both are closed
// when the test ends (closing twice is harmless).
func startEpisode(t testing.TB, sb *Sandbox, src string) (*Program, *Episode) {
	t.Helper()
	p, err := sb.Load(context.Background(), src)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	e, err := p.Reset(context.Background(), 1)
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	return p, e
}

func readTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	require.NoError(t, err)
	return string(b)
}

func TestBwrapAvailableHere(t *testing.T) {
	// CI and this machine install bubblewrap; the isolation tests below are
	// meaningless without it, so say so loudly instead of passing vacuously.
	sb := newSandbox(t, func(c *Config) { c.Strict = true })
	assert.Equal(t, IsolationBwrap, sb.Isolation())
}

func TestLoadResetStepDeterministic(t *testing.T) {
	sb := newSandbox(t, nil)
	ctx := context.Background()
	p, err := sb.Load(ctx, readTestdata(t, "counter.py"))
	require.NoError(t, err)
	defer p.Close()
	m := p.Meta()
	assert.Equal(t, Meta{Class: "Counter", Kind: "game", Name: "counter", Skill: "planning", MaxTurns: 1000000,
		RewardRange: []float64{0, 1}, HasReset: true, HasStep: true}, m)

	play := func(seed int64) []string {
		e, err := p.Reset(ctx, seed)
		require.NoError(t, err)
		defer func() { require.NoError(t, e.Close()) }()
		trace := []string{e.Observation, string(e.Info)}
		for range 12 {
			r, err := e.Step(ctx, "add2")
			require.NoError(t, err)
			trace = append(trace, r.Observation, string(r.Info))
		}
		return trace
	}
	a, b, c := play(1), play(1), play(2)
	assert.Equal(t, a, b, "same seed must replay identically")
	assert.NotEqual(t, a, c, "different seeds should differ for this env")
	assert.Contains(t, a[0], "Valid actions: add1 | add2")

	// One episode at a time per program.
	e, err := p.Reset(ctx, 3)
	require.NoError(t, err)
	_, err = p.Reset(ctx, 4)
	assert.ErrorIs(t, err, ErrEpisodeOpen)
	require.NoError(t, e.Close())
}

func TestForcedTruncationAndEpisodeOver(t *testing.T) {
	sb := newSandbox(t, nil)
	ctx := context.Background()
	src := `
from spade_env import Env
class Loop(Env):
    max_turns = 3
    def reset(self, seed=None):
        super().reset(seed)
        return "go", {}
    def step(self, action):
        return "again", 0.0, False, False, {}
`
	p, err := sb.Load(ctx, src)
	require.NoError(t, err)
	defer p.Close()
	e, err := p.Reset(ctx, 1)
	require.NoError(t, err)
	for i := 1; i <= 3; i++ {
		r, err := e.Step(ctx, "x")
		require.NoError(t, err)
		assert.Equal(t, i == 3, r.Truncated, "turn %d", i)
		assert.Equal(t, i == 3, r.ForcedTruncation, "turn %d", i)
	}
	_, err = e.Step(ctx, "x")
	assert.ErrorIs(t, err, ErrEpisodeOver)
	require.NoError(t, e.Close())
}

func TestNonFiniteRewardIsTransported(t *testing.T) {
	sb := newSandbox(t, nil)
	ctx := context.Background()
	p, err := sb.Load(ctx, `
import math
from spade_env import Env
class N(Env):
    def reset(self, seed=None):
        super().reset(seed)
        return "go", {"x": math.inf}
    def step(self, action):
        return "o", float("nan"), False, False, {"y": float("-inf")}
`)
	require.NoError(t, err)
	defer p.Close()
	e, err := p.Reset(ctx, 1)
	require.NoError(t, err)
	assert.JSONEq(t, `{"x":"Infinity"}`, string(e.Info))
	r, err := e.Step(ctx, "a")
	require.NoError(t, err)
	assert.True(t, math.IsNaN(r.Reward))
	assert.False(t, r.Finite())
	assert.JSONEq(t, `{"y":"-Infinity"}`, string(r.Info))
	require.NoError(t, e.Close())
}

// TestFailureKinds: each broken program fails with its named kind, within
// its limit, and the sandbox keeps serving other programs.
func TestFailureKinds(t *testing.T) {
	sb := newSandbox(t, func(c *Config) {
		c.CallTimeout = 1500 * time.Millisecond
		c.MemoryBytes = 256 << 20
		c.OutputBytes = 64 << 10
		c.ReplyBytes = 256 << 10
	})
	const head = "from spade_env import Env\nclass E(Env):\n    def reset(self, seed=None):\n        super().reset(seed)\n"
	cases := []struct {
		name, src string
		op        string // where it fails: load, reset, step
		kind      Kind
		detail    string
	}{
		{"syntax", "def f(:\n", "load", KindSyntax, "line 1"},
		{"no class", "x = 1\n", "load", KindNoClass, "no spade_env.Env subclass"},
		{"two classes", "from spade_env import Env\nclass A(Env): pass\nclass B(Env): pass\n", "load", KindNoClass, "A, B"},
		{"module raises", "raise ValueError('boom')\n", "load", KindException, "ValueError: boom"},
		{"reset raises", head + "        raise KeyError('k')\n    def step(self, a): pass\n", "reset", KindException, "KeyError"},
		{"reset arity", head + "        return 'only obs'\n    def step(self, a): pass\n", "reset", KindContract, "expected 2"},
		{"step arity", head + "        return 'o', {}\n    def step(self, a):\n        return 'o', 0.0, False, {}\n", "step", KindContract, "4 values"},
		{"step types", head + "        return 'o', {}\n    def step(self, a):\n        return 5, 0.0, False, False, {}\n", "step", KindContract, "observation is int"},
		{"infinite loop", head + "        return 'o', {}\n    def step(self, a):\n        while True: pass\n", "step", KindTimeout, "no reply within"},
		{"sys.exit", head + "        return 'o', {}\n    def step(self, a):\n        import sys; sys.exit(3)\n", "step", KindExit, "SystemExit"},
		{"os._exit", head + "        return 'o', {}\n    def step(self, a):\n        import os; os._exit(7)\n", "step", KindExit, "status 7"},
		{"segfault", head + "        return 'o', {}\n    def step(self, a):\n        import os, signal; os.kill(os.getpid(), signal.SIGSEGV)\n", "step", KindCrash, "SIGSEGV"},
		{"memory", head + "        self.big = bytearray(1 << 30)\n        return 'o', {}\n    def step(self, a): pass\n", "reset", KindMemory, "MemoryError"},
		{"output flood", head + "        return 'o', {}\n    def step(self, a):\n        while True: print('x' * 4096)\n", "step", KindOutputLimit, "stdout+stderr"},
		{"huge info", head + "        return 'o', {}\n    def step(self, a):\n        return 'o', 0.0, False, False, {'blob': 'x' * (1 << 20)}\n", "step", KindReplyLimit, "reply limit"},
		{"recursion", head + "        return 'o', {}\n    def step(self, a):\n        return self.step(a)\n", "step", KindRecursion, "RecursionError"},
		{"too large to compile", "x = 0\nif x == -1:\n    pass\n" + strings.Repeat("elif x == 1:\n    pass\n", 100_000), "load", KindMemory, "compiling the program: MemoryError"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			start := time.Now()
			err := func() error {
				p, err := sb.Load(ctx, tc.src)
				if err != nil {
					require.Equal(t, "load", tc.op, "unexpected load failure: %v", err)
					return err
				}
				defer p.Close()
				e, err := p.Reset(ctx, 1)
				if err != nil {
					require.Equal(t, "reset", tc.op, "unexpected reset failure: %v", err)
					return err
				}
				defer e.Close()
				_, err = e.Step(ctx, "a")
				return err
			}()
			require.Error(t, err)
			var se *Error
			require.True(t, errors.As(err, &se), "want *Error, got %T %v", err, err)
			assert.Equal(t, tc.kind, se.Kind, "error: %v", err)
			assert.Equal(t, tc.op, se.Op)
			assert.Contains(t, se.Detail+se.Traceback, tc.detail)
			assert.Less(t, time.Since(start), 8*time.Second)
		})
	}
}

// TestOutputIsValidUTF8: bytes a program prints that are not UTF-8 reach
// Error.Output (and from there Parquet string columns) as U+FFFD, and so do
// lone surrogates in the text it returns, in the raw Info too.
func TestOutputIsValidUTF8(t *testing.T) {
	sb := newSandbox(t, nil)
	src := `
import os, time
from spade_env import Env
class E(Env):
    def reset(self, seed=None):
        super().reset(seed)
        os.write(1, b"bad \xff\xfe bytes, cut \xe6\x97")
        time.sleep(0.3)  # lets the Go side read the output before the exit
        os._exit(5)
`
	ctx := context.Background()
	p, err := sb.Load(ctx, src)
	require.NoError(t, err)
	defer p.Close()
	_, err = p.Reset(ctx, 1)
	var se *Error
	require.True(t, errors.As(err, &se), "want *Error, got %T %v", err, err)
	assert.Equal(t, KindExit, se.Kind)
	assert.True(t, utf8.ValidString(se.Output), "output %q", se.Output)
	assert.Equal(t, "bad \uFFFD bytes, cut \uFFFD", se.Output)

	// Lone surrogates in Python text arrive as U+FFFD, in the raw Info too.
	_, e := startEpisode(t, sb, `
from spade_env import Env
class E(Env):
    def reset(self, seed=None):
        super().reset(seed)
        return "a\ud800b", {"note": "c\udfffd"}
`)
	assert.Equal(t, "a\uFFFDb", e.Observation)
	assert.True(t, utf8.Valid(e.Info), "info %q", e.Info)
	assert.JSONEq(t, `{"note": "c\uFFFDd"}`, string(e.Info))
}

// TestDerivedUIDsBoundWorkers: with uids derived from the pid, a process
// owns UIDStride of them; more workers would reach the next process's uids
// (and kill its sandboxes when a slot's uid is swept).
func TestDerivedUIDsBoundWorkers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("slot uids are used only as root")
	}
	_, err := New(Config{Workers: UIDStride + 1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "at most 512")
	sb, err := New(Config{Workers: UIDStride + 1, UIDBase: 3_000_000_000})
	require.NoError(t, err, "an explicit base has no such bound")
	require.NoError(t, sb.Close())
}

// TestCloseIsBounded: a program that answers "close" with other frames,
// forever, costs its caller one CallTimeout, not a hang (found by a red
// team: the program replaces the harness's read_frame in its own process).
func TestCloseIsBounded(t *testing.T) {
	sb := newSandbox(t, func(c *Config) { c.CallTimeout = time.Second })
	src := `
import sys, time
from spade_env import Env
H = sys.modules["spade_harness"]
read = H.read_frame
def read_frame(fd=3):
    req = read(fd)
    if req.get("op") == "close":
        while True:
            H.send({"ok": True})
            time.sleep(0.05)
    return req
H.read_frame = read_frame
class E(Env):
    def reset(self, seed=None):
        super().reset(seed)
        return "o", {}
`
	p, e := startEpisode(t, sb, src)
	start := time.Now()
	err := e.Close()
	assert.Error(t, err)
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.False(t, p.Alive(), "the sandbox of a program that never ends its episode is killed")
}

func TestEpisodeCrashAndTimeout(t *testing.T) {
	src := `
import os
from spade_env import Env
class E(Env):
    def reset(self, seed=None):
        super().reset(seed)
        return "o", {}
    def step(self, a):
        if a == "die": os._exit(1)
        if a == "hang":
            while True: pass
        return "ok", 1.0, True, False, {}
`
	for _, fork := range []bool{true, false} {
		t.Run(fmt.Sprintf("fork=%v", fork), func(t *testing.T) {
			sb := newSandbox(t, func(c *Config) { c.CallTimeout = time.Second; c.ForkEpisodes = fork })
			ctx := context.Background()
			p, err := sb.Load(ctx, src)
			require.NoError(t, err)
			defer p.Close()
			e, err := p.Reset(ctx, 1)
			require.NoError(t, err)
			_, err = e.Step(ctx, "die")
			assert.Equal(t, KindExit, KindOf(err))
			require.NoError(t, e.Close())
			if !fork {
				// In process, os._exit ends the program's process: the
				// program is dead and says why; a new Load serves again.
				assert.Contains(t, err.Error(), "program process exited with status 1")
				assert.False(t, p.Alive())
				_, err = p.Reset(ctx, 2)
				assert.Equal(t, KindExit, KindOf(err))
				require.NoError(t, p.Close())
				p, err = sb.Load(ctx, src)
				require.NoError(t, err)
				defer p.Close()
			} else {
				assert.Contains(t, err.Error(), "episode process exited with status 1")
			}

			e, err = p.Reset(ctx, 2) // the fork server, or the new program, serves
			require.NoError(t, err)
			r, err := e.Step(ctx, "fine")
			require.NoError(t, err)
			assert.True(t, r.Terminated)
			require.NoError(t, e.Close())

			e, err = p.Reset(ctx, 3)
			require.NoError(t, err)
			_, err = e.Step(ctx, "hang")
			assert.Equal(t, KindTimeout, KindOf(err))
			assert.False(t, p.Alive())
			require.NoError(t, e.Close())
			_, err = p.Reset(ctx, 4)
			assert.ErrorIs(t, err, ErrClosed)
		})
	}
}

func TestContextCancelKillsCall(t *testing.T) {
	sb := newSandbox(t, func(c *Config) { c.CallTimeout = 30 * time.Second })
	p, err := sb.Load(context.Background(), "import time\nfrom spade_env import Env\nclass E(Env):\n    def reset(self, seed=None):\n        time.sleep(60)\n")
	require.NoError(t, err)
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = p.Reset(ctx, 1)
	assert.Equal(t, KindCanceled, KindOf(err))
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 5*time.Second)
}

func TestEnvironmentScrubbed(t *testing.T) {
	t.Setenv("AWS_SECRET_ACCESS_KEY", "parent-secret-value")
	for _, noBwrap := range []bool{false, true} {
		sb := newSandbox(t, func(c *Config) { c.NoBwrap = noBwrap })
		p, err := sb.Load(context.Background(), `
import os, json
from spade_env import Env
class E(Env):
    def reset(self, seed=None):
        return json.dumps(dict(os.environ), sort_keys=True), {}
    def step(self, a): pass
`)
		require.NoError(t, err)
		e, err := p.Reset(context.Background(), 1)
		require.NoError(t, err)
		var env map[string]string
		require.NoError(t, json.Unmarshal([]byte(e.Observation), &env))
		assert.NotContains(t, e.Observation, "parent-secret-value")
		assert.Equal(t, "0", env["PYTHONHASHSEED"])
		for k := range env {
			assert.Contains(t, []string{"PATH", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "LANG", "LD_BIND_NOW", "LC_CTYPE", "PWD"}, k, "unexpected variable (noBwrap=%v)", noBwrap)
		}
		require.NoError(t, e.Close())
		require.NoError(t, p.Close())
	}
}

func TestStrictRefusesWithoutBwrap(t *testing.T) {
	_, err := New(Config{NoBwrap: true, Strict: true})
	assert.ErrorIs(t, err, ErrNoIsolation)
	_, err = New(Config{Bwrap: "/nonexistent/bwrap", Strict: true})
	assert.ErrorIs(t, err, ErrNoIsolation)
	_, err = New(Config{Python: "/nonexistent/python3"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "/nonexistent/python3")
}

func TestSlotsBoundConcurrency(t *testing.T) {
	sb := newSandbox(t, func(c *Config) { c.Workers = 1 })
	src := readTestdata(t, "counter.py")
	p, err := sb.Load(context.Background(), src)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = sb.Load(ctx, src)
	assert.Equal(t, KindCanceled, KindOf(err), "second load must wait for the only slot")
	require.NoError(t, p.Close())
	p2, err := sb.Load(context.Background(), src)
	require.NoError(t, err)
	require.NoError(t, p2.Close())
}

func TestToolStatus(t *testing.T) {
	sb := newSandbox(t, nil)
	ctx := context.Background()
	p, err := sb.Load(ctx, `
from spade_env import ToolUseEnv
class Shop(ToolUseEnv):
    tools = [
        {"name": "buy", "description": "Buy an item.", "parameters": {"type": "object",
         "properties": {"item": {"type": "string"}}, "required": ["item"]}},
        {"name": "ghost", "description": "No method.", "parameters": {"type": "object", "properties": {}}},
    ]
    def initial_state(self):
        return {"cart": []}
    def instructions(self):
        return [("Buy an apple.", lambda s: "apple" in s["cart"]),
                ("Pay.", lambda s: s.get("paid", False)),
                ("Leave.", lambda s: s["left"])]
    def tool_buy(self, item):
        self.state["cart"].append(item)
        return "bought " + item
    def solution(self):
        return ['{"name": "buy", "arguments": {"item": "apple"}}']
`)
	require.NoError(t, err)
	defer p.Close()
	assert.Equal(t, "tool_use", p.Meta().Kind)
	e, err := p.Reset(ctx, 1)
	require.NoError(t, err)
	assert.Contains(t, e.Observation, "Instruction 1 of 3: Buy an apple.")
	st, err := e.ToolStatus(ctx)
	require.NoError(t, err)
	assert.Equal(t, []bool{false, false, false}, st.Criteria)
	assert.Equal(t, [][]string{{}, {"paid"}, {"left"}}, st.MissingKeys)
	assert.Contains(t, st.CriterionErrors[2], "KeyError")
	assert.Equal(t, []string{"buy", "ghost"}, st.Tools)
	assert.Contains(t, strings.Join(st.Problems, ";"), "tool ghost: no method tool_ghost")
	assert.Equal(t, []string{`{"name": "buy", "arguments": {"item": "apple"}}`}, st.Solution)
	r, err := e.Step(ctx, st.Solution[0])
	require.NoError(t, err)
	assert.InDelta(t, 1.0/3, r.Reward, 1e-12)
	st, err = e.ToolStatus(ctx)
	require.NoError(t, err)
	assert.Equal(t, []bool{true, false, false}, st.Criteria)
	require.NoError(t, e.Close())
}

// TestToolStatusSignatures: a tool method that cannot take its schema's
// arguments as keywords is a problem, with inspect's reason; methods that
// can, decorated ones and **kwargs included, are not.
func TestToolStatusSignatures(t *testing.T) {
	sb := newSandbox(t, nil)
	ctx := context.Background()
	p, err := sb.Load(ctx, `
import functools
from spade_env import ToolUseEnv

def logged(f):
    @functools.wraps(f)
    def inner(*args, **kwargs):
        return f(*args, **kwargs)
    return inner

def tool(name, props, required):
    return {"name": name, "description": "A tool.", "parameters": {"type": "object",
            "properties": {p: {"type": "string"} for p in props}, "required": required}}

class Desk(ToolUseEnv):
    tools = [tool("plain", ["a", "b"], ["a"]), tool("extra", ["a", "z"], ["a"]), tool("needs", ["a"], []),
             tool("wrapped", ["a"], ["a"]), tool("wrapped_bad", ["q"], ["q"]), tool("kw", ["a", "q"], [])]
    def initial_state(self):
        return {}
    def instructions(self):
        return [("Do.", lambda s: False)]
    def tool_plain(self, a, b="x"):
        return ""
    def tool_extra(self, a):
        return ""
    def tool_needs(self, a, b):
        return ""
    @logged
    def tool_wrapped(self, a):
        return ""
    @logged
    def tool_wrapped_bad(self, a):
        return ""
    def tool_kw(self, **kwargs):
        return ""
`)
	require.NoError(t, err)
	defer p.Close()
	e, err := p.Reset(ctx, 1)
	require.NoError(t, err)
	defer e.Close()
	st, err := e.ToolStatus(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"tool extra: tool_extra does not accept the schema's arguments (got an unexpected keyword argument 'z')",
		"tool needs: tool_needs does not accept the schema's arguments (missing a required argument: 'b')",
		"tool wrapped_bad: tool_wrapped_bad does not accept the schema's arguments (missing a required argument: 'a')",
	}, st.Problems)
}

// TestRunningSandboxesFirst: programs loaded one after another reuse the
// running sandbox of a free slot instead of starting one in every slot in
// turn (which cost a sandbox start per program until every slot had one).
func TestRunningSandboxesFirst(t *testing.T) {
	sb := newSandbox(t, func(c *Config) { c.Workers = 4 })
	ctx := context.Background()
	src := readTestdata(t, "counter.py")
	for range 6 {
		p, err := sb.Load(ctx, src)
		require.NoError(t, err)
		require.NoError(t, p.Close())
	}
	require.NotNil(t, sb.idle[0], "the probe's sandbox serves every program")
	for slot := 1; slot < 4; slot++ {
		assert.Nil(t, sb.idle[slot], "slot %d started a sandbox while slot 0's was idle", slot)
	}
	// Two at once: one more sandbox, not more.
	p1, err := sb.Load(ctx, src)
	require.NoError(t, err)
	p2, err := sb.Load(ctx, src)
	require.NoError(t, err)
	require.NoError(t, p1.Close())
	require.NoError(t, p2.Close())
	started := 0
	for _, w := range sb.idle {
		if w != nil {
			started++
		}
	}
	assert.Equal(t, 2, started)
}

// TestSandboxReuseIsClean runs a program that litters its sandbox (files in
// /tmp, an unwritable directory, /dev/shm, a setsid daemon flooding the
// reply channel with forged frames) and then, in the same slot, a program
// that reports what it can see: nothing of the first may reach it. A
// program that changes /dev gets its sandbox replaced, and with
// ProgramsPerSandbox 1 every program gets a fresh one.
func TestSandboxReuseIsClean(t *testing.T) {
	const litter = `
import os, time
from spade_env import Env
class Litter(Env):
    def reset(self, seed=None):
        super().reset(seed)
        open("/tmp/left.txt", "w").write("a")
        os.makedirs("/tmp/d/e", exist_ok=True)
        open("/tmp/d/e/f", "w").write("c")
        os.chmod("/tmp/d/e", 0o500)
        os.chmod("/tmp/d", 0o500)
        open("/dev/shm/left", "w").write("b")
        # Attributes of the shared directories themselves, and keys: a
        # default ACL (owner read-only) would govern the next program's
        # files in /tmp; an xattr or a key is a channel to it.
        os.setxattr("/tmp", "user.note", b"left")
        os.setxattr("/dev/shm", "user.note", b"left")
        acl = (2).to_bytes(4, "little") + b"".join(
            tag.to_bytes(2, "little") + (4).to_bytes(2, "little") + (0xFFFFFFFF).to_bytes(4, "little")
            for tag in (0x01, 0x04, 0x20))  # user::r--, group::r--, other::r--
        os.setxattr("/tmp", "system.posix_acl_default", acl)
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        add_key = {"x86_64": 248, "aarch64": 217}[os.uname().machine]
        for ring in (-3, -4, -5):  # session, user, user-session keyrings
            libc.syscall(add_key, b"user", b"left", b"x", 1, ring)
        libc.mq_open(b"/spade-left", 0o100 | 0o2, 0o600, None)  # O_CREAT|O_RDWR: a message queue
        for path in ("/tmp", "/dev/shm", "/dev", "/dev/ptmx"):  # 64 bits each
            os.utime(path, ns=(0x48454C4C4F2D4221, 0x48454C4C4F2D4221), follow_symlinks=False)
        if DEV:
            open("/dev/planted", "w").write("d")
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(0.2)  # after the reset reply: flood while the program closes
                forged = b'{"ok":true,"meta":{"class":"Forged","kind":"game"}}'
                frame = len(forged).to_bytes(4, "big") + forged
                while True:
                    try:
                        os.write(4, frame)
                    except OSError:
                        time.sleep(0.01)
            os._exit(0)
        time.sleep(0.1)
        return "littered", {}
`
	const observer = `
import ctypes, json, os, tempfile
from spade_env import Env
libc = ctypes.CDLL(None, use_errno=True)
keyctl = {"x86_64": 250, "aarch64": 219}[os.uname().machine]
class Clean(Env):
    def reset(self, seed=None):
        super().reset(seed)
        times = [os.stat(p, follow_symlinks=False).st_mtime_ns for p in ("/tmp", "/dev/shm", "/dev", "/dev/ptmx")]
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid()))
        live = [p for p in pids if "State:\tZ" not in open(f"/proc/{p}/status").read()]
        keys = 0
        for ring in (-3, -4, -5):
            n = libc.syscall(keyctl, 11, ring, None, 0)  # KEYCTL_READ: bytes of key serials
            keys += max(n, 0) // 4
        mq = libc.mq_open(b"/spade-left", 0)  # O_RDONLY
        mq_errno = ctypes.get_errno() if mq < 0 else 0
        seen = {"tmp": os.listdir("/tmp"), "shm": os.listdir("/dev/shm"), "mq_errno": mq_errno,
                "planted": os.path.exists("/dev/planted"), "others": live,
                "xattrs": os.listxattr("/tmp") + os.listxattr("/dev/shm"), "keys": keys, "times": times}
        d = tempfile.mkdtemp()  # a default ACL would make this read-only
        open(os.path.join(d, "state.txt"), "w").write("ok")
        os.unlink(os.path.join(d, "state.txt"))
        os.rmdir(d)
        return json.dumps(seen), {}
`
	ctx := context.Background()
	look := func(t *testing.T, sb *Sandbox) map[string]any {
		t.Helper()
		p, err := sb.Load(ctx, observer)
		require.NoError(t, err)
		defer p.Close()
		assert.Equal(t, "Clean", p.Meta().Class, "a forged frame was read as the load reply")
		e, err := p.Reset(ctx, 1)
		require.NoError(t, err)
		defer e.Close()
		var seen map[string]any
		require.NoError(t, json.Unmarshal([]byte(e.Observation), &seen))
		if keyringFilter() == nil {
			delete(seen, "mq_errno")
		}
		return seen
	}
	litterOnce := func(t *testing.T, sb *Sandbox, dev bool) {
		t.Helper()
		src := strings.Replace(litter, "if DEV:", fmt.Sprintf("if %v:", map[bool]string{true: "True", false: "False"}[dev]), 1)
		p, err := sb.Load(ctx, src)
		require.NoError(t, err)
		e, err := p.Reset(ctx, 1)
		require.NoError(t, err)
		assert.Equal(t, "littered", e.Observation)
		time.Sleep(500 * time.Millisecond) // the daemon fills the reply pipe with forged frames
		require.NoError(t, p.Close())      // the episode is still open: the daemon runs
	}
	clean := map[string]any{"tmp": []any{}, "shm": []any{}, "planted": false, "others": []any{}, "xattrs": []any{}, "keys": 0.0, "times": []any{0.0, 0.0, 0.0, 0.0}, "mq_errno": 38.0}
	if keyringFilter() == nil {
		// No seccomp filter on this architecture: a message queue the
		// litter left is still there (docs/sandbox.md); not checked.
		delete(clean, "mq_errno")
	}

	t.Run("reused", func(t *testing.T) {
		sb := newSandbox(t, func(c *Config) { c.Workers = 1 })
		for range 3 {
			litterOnce(t, sb, false)
			zygote := sb.idle[0]
			require.NotNil(t, zygote, "a clean sandbox stays as the slot's zygote")
			assert.Equal(t, clean, look(t, sb))
			assert.Same(t, zygote, sb.idle[0], "the sandbox was reused")
		}
	})
	t.Run("dev changed", func(t *testing.T) {
		sb := newSandbox(t, func(c *Config) { c.Workers = 1 })
		litterOnce(t, sb, true)
		assert.Nil(t, sb.idle[0], "a sandbox whose /dev changed must be replaced")
		assert.Equal(t, clean, look(t, sb))
	})
	t.Run("program dies behind a full reply pipe", func(t *testing.T) {
		// A daemon fills the reply pipe, then the program's process is
		// killed while Go waits for nothing: the zygote must not block
		// writing program_ended, the reap must succeed (the sandbox stays
		// the slot's zygote), and the next program must read none of the
		// junk.
		const flood = `
import os, signal, time
from spade_env import Env
class Flood(Env):
    def reset(self, seed=None):
        super().reset(seed)
        me = os.getpid()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                while True:
                    os.write(4, b"\x00\x00\x00\x05junk!")
            time.sleep(0.4)
            os.kill(me, signal.SIGKILL)
            os._exit(0)
        return "flooding", {}
`
		sb := newSandbox(t, func(c *Config) { c.Workers = 1 })
		p, err := sb.Load(ctx, flood)
		require.NoError(t, err)
		e, err := p.Reset(ctx, 1)
		require.NoError(t, err)
		assert.Equal(t, "flooding", e.Observation)
		time.Sleep(time.Second) // the pipe fills, the program process dies
		require.NoError(t, p.Close())
		assert.NotNil(t, sb.idle[0], "the reap failed: the zygote blocked on the full pipe")
		assert.Equal(t, clean, look(t, sb))
	})
	t.Run("tmp too deep to empty", func(t *testing.T) {
		// 1,200 nested directories: past Python's recursion limit and
		// PATH_MAX for the zygote's wipe. The sandbox must be replaced, not
		// crash or be reused dirty.
		const deep = `
import os
from spade_env import Env
class Deep(Env):
    def reset(self, seed=None):
        super().reset(seed)
        os.chdir("/tmp")
        for _ in range(1200):
            os.mkdir("d")
            os.chdir("d")
        return "deep", {}
`
		sb := newSandbox(t, func(c *Config) { c.Workers = 1 })
		p, err := sb.Load(ctx, deep)
		require.NoError(t, err)
		e, err := p.Reset(ctx, 1)
		require.NoError(t, err)
		assert.Equal(t, "deep", e.Observation)
		require.NoError(t, p.Close())
		assert.Nil(t, sb.idle[0], "a sandbox whose /tmp could not be emptied must be replaced")
		assert.Equal(t, clean, look(t, sb))
	})
	t.Run("shared process state", func(t *testing.T) {
		// What a program process can change on the zygote itself or on the
		// file descriptions all programs share (found by review): the next
		// program must see exactly what a fresh sandbox shows.
		const report = `
import fcntl, json, os, resource
from spade_env import Env
class Report(Env):
    def reset(self, seed=None):
        super().reset(seed)
        return json.dumps({
            "as": resource.getrlimit(resource.RLIMIT_AS),
            "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "sched": os.sched_getscheduler(0),
            "cpus": len(os.sched_getaffinity(0)),
            "tmp": oct(os.stat("/tmp").st_mode),
            "fd3": fcntl.fcntl(3, fcntl.F_GETFL), "own3": fcntl.fcntl(3, fcntl.F_GETOWN),
            "fd4": fcntl.fcntl(4, fcntl.F_GETFL), "sig4": fcntl.fcntl(4, fcntl.F_GETSIG),
            "shm": open("/proc/sysvipc/shm").read().count("\n"),
            "shm_size": os.statvfs("/dev/shm").f_blocks * os.statvfs("/dev/shm").f_frsize,
        }), {}
`
		attacks := map[string]string{
			"sigio on the request pipe":                `fcntl.fcntl(3, fcntl.F_SETOWN, -1); fcntl.fcntl(3, fcntl.F_SETFL, fcntl.fcntl(3, fcntl.F_GETFL) | os.O_ASYNC)`,
			"signal and packet mode on the reply pipe": `threading.Thread(target=lambda: (time.sleep(0.2), fcntl.fcntl(4, fcntl.F_SETSIG, 9), fcntl.fcntl(4, fcntl.F_SETFL, fcntl.fcntl(4, fcntl.F_GETFL) | os.O_DIRECT))).start()`,
			"lower the zygote's rlimits":               `resource.prlimit(1, resource.RLIMIT_AS, (200 << 20, 200 << 20))`,
			"deprioritise the zygote":                  `os.setpriority(os.PRIO_PROCESS, 1, 19); os.sched_setaffinity(1, {min(os.sched_getaffinity(0))})`,
			"read-only /tmp":                           `os.chmod("/tmp", 0o555)`,
			"System V shared memory":                   `ctypes.CDLL(None).shmget(0, 1 << 20, 0o1600)`,
		}
		sbFresh := newSandbox(t, func(c *Config) { c.Workers = 1 })
		observe := func(t *testing.T, sb *Sandbox) string {
			t.Helper()
			p, err := sb.Load(ctx, report)
			require.NoError(t, err)
			defer p.Close()
			e, err := p.Reset(ctx, 1)
			require.NoError(t, err)
			defer e.Close()
			return e.Observation
		}
		want := observe(t, sbFresh)
		assert.Contains(t, want, `"shm": 1,`, "a fresh sandbox has no segment (header line only)")
		for name, attack := range attacks {
			t.Run(name, func(t *testing.T) {
				sb := newSandbox(t, func(c *Config) { c.Workers = 1 })
				src := "import ctypes, fcntl, os, resource, threading, time\nfrom spade_env import Env\n" +
					"class Attack(Env):\n    def reset(self, seed=None):\n        super().reset(seed)\n        " +
					attack + "\n        return 'done', {}\n"
				p, err := sb.Load(ctx, src)
				require.NoError(t, err)
				e, err := p.Reset(ctx, 1)
				require.NoError(t, err, "the attack itself must run")
				assert.Equal(t, "done", e.Observation)
				time.Sleep(400 * time.Millisecond)
				require.NoError(t, p.Close())
				for range 2 {
					assert.Equal(t, want, observe(t, sb))
				}
			})
		}
	})
	t.Run("one program per sandbox", func(t *testing.T) {
		sb := newSandbox(t, func(c *Config) { c.Workers = 1; c.ProgramsPerSandbox = 1 })
		litterOnce(t, sb, false)
		assert.Nil(t, sb.idle[0])
		assert.Equal(t, clean, look(t, sb))
	})
}

// TestAliveAfterKillBetweenCalls: a program process killed between calls
// (here by a thread of its own, standing in for the OOM killer or a kill by
// hand) reads as not alive before any call fails; a live program still
// reads as alive after its episodes.
func TestAliveAfterKillBetweenCalls(t *testing.T) {
	src := `
import os, signal, threading, time
from spade_env import Env
class E(Env):
    def reset(self, seed=None):
        super().reset(seed)
        if seed == 2:
            threading.Thread(target=lambda: (time.sleep(0.2), os.kill(os.getpid(), signal.SIGKILL)), daemon=True).start()
        return "o", {}
    def step(self, a):
        return "ok", 1.0, True, False, {}
`
	sb := newSandbox(t, nil)
	ctx := context.Background()
	p, err := sb.Load(ctx, src)
	require.NoError(t, err)
	defer p.Close()
	for seed := int64(1); seed <= 2; seed++ {
		e, err := p.Reset(ctx, seed)
		require.NoError(t, err)
		_, err = e.Step(ctx, "a")
		require.NoError(t, err)
		require.NoError(t, e.Close())
		if seed == 1 {
			time.Sleep(300 * time.Millisecond)
			require.True(t, p.Alive(), "a program between episodes is alive")
		}
	}
	require.Eventually(t, func() bool { return !p.Alive() }, 5*time.Second, 20*time.Millisecond,
		"a program process killed between calls reads as dead")
	_, err = p.Reset(ctx, 3)
	require.Error(t, err, "and a call confirms it")
	p2, err := sb.Load(ctx, src)
	require.NoError(t, err, "the slot serves a new program")
	defer p2.Close()
	require.True(t, p2.Alive())

	// With forked episodes the kill takes only an episode process, which
	// has ended at Close anyway: the program stays alive.
	sbf := newSandbox(t, func(c *Config) { c.ForkEpisodes = true })
	pf, err := sbf.Load(ctx, src)
	require.NoError(t, err)
	defer pf.Close()
	for seed := int64(1); seed <= 3; seed++ {
		e, err := pf.Reset(ctx, seed)
		require.NoError(t, err)
		_, err = e.Step(ctx, "a")
		require.NoError(t, err)
		require.NoError(t, e.Close())
		time.Sleep(300 * time.Millisecond)
		require.True(t, pf.Alive(), "fork mode, after episode %d", seed)
	}
}

// TestResetFresh: ResetFresh plays an episode on the class of a second
// execution of the program's code, so a value drawn once at module level
// differs from the loaded class's, while the loaded class (later Resets)
// keeps its own; module-level code that cannot run twice falls back to the
// loaded class.
func TestResetFresh(t *testing.T) {
	const salted = `import os
from spade_env import Env
SALT = os.urandom(8).hex()
class E(Env):
    max_turns = 2
    def reset(self, seed=None):
        super().reset(seed)
        return SALT, {}
    def step(self, a):
        return SALT, 0.0, True, False, {}
`
	const once = `from spade_env import Env
open("/tmp/once", "x").close()
class E(Env):
    max_turns = 2
    def reset(self, seed=None):
        super().reset(seed)
        return "same", {}
    def step(self, a):
        return "same", 0.0, True, False, {}
`
	obs := func(t *testing.T, p *Program, fresh bool) string {
		t.Helper()
		reset := p.Reset
		if fresh {
			reset = p.ResetFresh
		}
		e, err := reset(context.Background(), 1)
		require.NoError(t, err)
		defer func() { require.NoError(t, e.Close()) }()
		r, err := e.Step(context.Background(), "x")
		require.NoError(t, err)
		require.Equal(t, e.Observation, r.Observation)
		return e.Observation
	}
	for _, fork := range []bool{true, false} {
		t.Run(fmt.Sprintf("fork=%v", fork), func(t *testing.T) {
			sb := newSandbox(t, func(c *Config) { c.ForkEpisodes = fork })
			p, err := sb.Load(context.Background(), salted)
			require.NoError(t, err)
			defer p.Close()
			loaded := obs(t, p, false)
			fresh := obs(t, p, true)
			assert.Len(t, fresh, 16)
			assert.NotEqual(t, loaded, fresh, "a second execution draws another salt")
			assert.Equal(t, loaded, obs(t, p, false), "the loaded class keeps its salt")
			assert.NotEqual(t, fresh, obs(t, p, true))

			q, err := sb.Load(context.Background(), once)
			require.NoError(t, err)
			defer q.Close()
			assert.Equal(t, "same", obs(t, q, true), "falls back to the loaded class")
			assert.Equal(t, "same", obs(t, q, false))
		})
	}
}

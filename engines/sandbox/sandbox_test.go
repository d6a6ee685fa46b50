package sandbox

import (
	"context"
	"errors"
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

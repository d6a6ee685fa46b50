package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

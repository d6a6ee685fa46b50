package envcheck

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/spade-pipeline/spade/engines/sandbox"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.json")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newSandbox(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	sb, err := sandbox.New(sandbox.Config{Strict: true, Workers: 2, CallTimeout: 3 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { sb.Close() })
	return sb
}

// stable removes what legitimately varies between runs (timings) so a
// report can be compared byte for byte.
func stable(rep Report) Report {
	rep.Duration = 0
	checks := append([]Result(nil), rep.Checks...)
	for i := range checks {
		checks[i].Duration = 0
	}
	rep.Checks = checks
	return rep
}

// TestGoldenReports pins the full report (every check's verdict and detail)
// for the examples and for deterministic broken programs. Run with -update
// to rewrite after an intended change.
func TestGoldenReports(t *testing.T) {
	sb := newSandbox(t)
	files := []string{
		"../../docs/examples/guess_game.py",
		"../../docs/examples/bank_tooluse.py",
		"testdata/hostile/wrong_arity.py",
		"testdata/hostile/nan_reward.py",
		"testdata/hostile/syntax_error.py",
		"testdata/hostile/missing_step.py",
		"testdata/hostile/tool_reset_gate.py",
		"testdata/hostile/tool_impossible.py",
		"testdata/hostile/alloc_reset.py",
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".py")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			rep := stable(Check(context.Background(), sb, string(src), Options{}))
			got, err := json.MarshalIndent(rep, "", "  ")
			require.NoError(t, err)
			got = append(got, '\n')
			golden := filepath.Join("testdata", "golden", name+".json")
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(golden), 0o755))
				require.NoError(t, os.WriteFile(golden, got, 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "run go test -update to create %s", golden)
			assert.Equal(t, string(want), string(got))
		})
	}
}

func TestExamplesValidAndMetadata(t *testing.T) {
	sb := newSandbox(t)
	cases := []struct {
		file, kind, name string
		checks           int
	}{
		{"../../docs/examples/guess_game.py", "game", "guess_game", 11},
		{"../../docs/examples/bank_tooluse.py", "tool_use", "bank_transfer_and_invoice", 13},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src, err := os.ReadFile(tc.file)
			require.NoError(t, err)
			rep := Check(context.Background(), sb, string(src), Options{Seeds: []int64{7, 8, 9, 10}})
			require.True(t, rep.Valid, "%+v", rep)
			assert.Empty(t, rep.Reason)
			assert.Equal(t, tc.kind, rep.Kind)
			require.NotNil(t, rep.Meta)
			assert.Equal(t, tc.name, rep.Meta.Name)
			assert.Len(t, rep.Checks, tc.checks)
			for _, c := range rep.Checks {
				assert.True(t, c.Passed, c.Name)
				assert.NotEmpty(t, c.Detail, c.Name)
			}
			q := QuickCheck(context.Background(), sb, string(src), Options{})
			assert.True(t, q.Valid, "%+v", q)
			assert.Len(t, q.Checks, len(quickChecks))
		})
	}
}

func TestQuickCheckCatchesEarlyFailures(t *testing.T) {
	sb := newSandbox(t)
	for _, tc := range []struct{ file, reason string }{
		{"testdata/hostile/syntax_error.py", CheckCompile},
		{"testdata/hostile/wrong_arity.py", CheckStepTuple},
		{"testdata/hostile/alloc_reset.py", CheckReset},
	} {
		src, err := os.ReadFile(tc.file)
		require.NoError(t, err)
		rep := QuickCheck(context.Background(), sb, string(src), Options{})
		assert.False(t, rep.Valid, tc.file)
		assert.Equal(t, tc.reason, rep.Reason, tc.file)
	}
}

func TestOptionsDefaults(t *testing.T) {
	o := Options{Seeds: []int64{1}}.withDefaults()
	assert.Equal(t, []int64{1, 0, 2}, o.Seeds, "padded to 3 distinct seeds")
	assert.Equal(t, 16<<10, o.MaxObservationBytes)
	assert.Equal(t, 100, o.MaxTurnsLimit)
	assert.Equal(t, 60*time.Second, o.Timeout)
}

// TestTimeoutOptionBoundsValidation: Options.Timeout ends a validation
// stuck in a step that has not yet reached the sandbox's call timeout
// (3 s here); the report says the time limit ran out during probe_step
// rather than blaming the step for a cancellation.
func TestTimeoutOptionBoundsValidation(t *testing.T) {
	sb := newSandbox(t)
	src, err := os.ReadFile("testdata/hostile/infinite_loop_step.py")
	require.NoError(t, err)
	start := time.Now()
	rep := Check(context.Background(), sb, string(src), Options{Timeout: 1 * time.Second})
	assert.False(t, rep.Valid)
	assert.Equal(t, "timeout", rep.Reason)
	assert.Less(t, time.Since(start), 10*time.Second)
	stopped := stoppedCheck(t, rep)
	assert.Equal(t, CheckProbeStep, stopped.Name)
	assert.Contains(t, stopped.Detail, "time limit of 1s")
}

// stoppedCheck is the one check of rep that neither passed nor was
// skipped, with its name in the report's "stopped" field.
func stoppedCheck(t *testing.T, rep Report) Result {
	t.Helper()
	var out []Result
	for _, c := range rep.Checks {
		if !c.Passed && !c.Skipped {
			out = append(out, c)
		}
	}
	require.Len(t, out, 1, "%+v", rep.Checks)
	raw, err := json.Marshal(rep)
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"stopped":"`+out[0].Name+`"`)
	return out[0]
}

// TestTimeoutOptionTooShort: a time limit too short for a valid program
// (the CLI's --timeout 1ms) is reported as such, not as a compile error
// ("load: canceled: context deadline exceeded").
func TestTimeoutOptionTooShort(t *testing.T) {
	sb := newSandbox(t)
	src, err := os.ReadFile("../../docs/examples/guess_game.py")
	require.NoError(t, err)
	for _, quick := range []bool{false, true} {
		check := Check
		if quick {
			check = QuickCheck
		}
		rep := check(context.Background(), sb, string(src), Options{Timeout: time.Millisecond})
		assert.False(t, rep.Valid)
		assert.Equal(t, "timeout", rep.Reason)
		stopped := stoppedCheck(t, rep)
		assert.Contains(t, stopped.Detail, "time limit of 1ms")
		assert.Empty(t, stopped.ErrorKind, "a cancellation is not the program's failure")
		for _, c := range rep.Checks {
			assert.NotContains(t, c.Detail, "canceled", c.Name)
		}
	}
}

// TestCallTimeoutStaysTheProgramsFault: a step that loops forever runs
// into the sandbox's call timeout (3 s) well within Options.Timeout, and
// stays the program's failure: probe_step, error kind timeout.
func TestCallTimeoutStaysTheProgramsFault(t *testing.T) {
	sb := newSandbox(t)
	src, err := os.ReadFile("testdata/hostile/infinite_loop_step.py")
	require.NoError(t, err)
	rep := Check(context.Background(), sb, string(src), Options{Timeout: 30 * time.Second})
	assert.False(t, rep.Valid)
	assert.Equal(t, CheckProbeStep, rep.Reason)
	for _, c := range rep.Checks {
		if c.Name == CheckProbeStep {
			assert.Equal(t, "timeout", c.ErrorKind)
		}
	}
	raw, err := json.Marshal(rep)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), `"stopped"`)
}

// TestStateAcrossInstances: a program that keeps state outside its
// instances (a class attribute counting episodes) makes its episodes depend
// on the ones before. With episodes in the program's process (the default)
// the determinism check, which replays every seed after the other
// episodes, rejects it; with forked episodes each starts from the freshly
// loaded program and it passes.
func TestStateAcrossInstances(t *testing.T) {
	const src = `
from spade_env import Env, valid_actions_line

class Leaky(Env):
    name = "leaky"
    skill = "planning"
    max_turns = 3
    reward_range = (0.0, 1.0)
    episodes = 0

    def reset(self, seed=None):
        super().reset(seed)
        Leaky.episodes += 1
        self.t = 0
        return f"Episode {Leaky.episodes}. " + valid_actions_line(["go"]), {}

    def step(self, action):
        self.t += 1
        if action != "go":
            return "Unknown action. " + valid_actions_line(["go"]), 0.0, False, False, {}
        done = self.t >= 2
        return "went", 1.0 if done else 0.0, done, False, {"success": done}
`
	for _, fork := range []bool{false, true} {
		t.Run(fmt.Sprintf("fork=%v", fork), func(t *testing.T) {
			sb, err := sandbox.New(sandbox.Config{Strict: true, Workers: 1, CallTimeout: 3 * time.Second, ForkEpisodes: fork})
			require.NoError(t, err)
			defer sb.Close()
			rep := Check(context.Background(), sb, src, Options{})
			if fork {
				assert.True(t, rep.Valid, "forked episodes start fresh: %+v", rep)
				return
			}
			assert.False(t, rep.Valid)
			assert.Equal(t, CheckDeterministic, rep.Reason)
		})
	}
}

// noActionsLine is a valid game whose observations never list their
// actions.
const noActionsLine = `from spade_env import Env


class Quiet(Env):
    name = "quiet"
    max_turns = 3
    reward_range = (0.0, 1.0)

    def reset(self, seed=None):
        super().reset(seed)
        self.turn = 0
        return "Say something.", {}

    def step(self, action):
        self.turn += 1
        done = self.turn >= self.max_turns
        return "Heard.", 0.0, done, False, {"success": False} if done else {}
`

// TestActionsLine: under Options.ActionsLine (rollout.action_format
// valid_actions) a game whose observations have no "Valid actions:" line
// fails the check actions_line; without the option it is valid; the
// examples pass it; tool use is exempt.
func TestActionsLine(t *testing.T) {
	sb := newSandbox(t)
	rep := Check(context.Background(), sb, noActionsLine, Options{})
	require.True(t, rep.Valid, "%+v", rep)
	rep = Check(context.Background(), sb, noActionsLine, Options{ActionsLine: true})
	require.False(t, rep.Valid)
	require.Equal(t, CheckActionsLine, rep.Reason)
	last := rep.Checks[len(rep.Checks)-1]
	require.Equal(t, CheckActionsLine, last.Name)
	require.Contains(t, last.Detail, `reset(seed=0): observation has no "Valid actions: a | b | c" line`)
	skipped := 0
	for _, c := range rep.Checks {
		if c.Skipped {
			skipped++
			require.False(t, c.Passed)
		}
	}
	require.Positive(t, skipped, "the checks after the failure are skipped, not failed")
	for file, n := range map[string]int{"../../docs/examples/guess_game.py": 12, "../../docs/examples/bank_tooluse.py": 13} {
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		rep := Check(context.Background(), sb, string(src), Options{ActionsLine: true})
		require.True(t, rep.Valid, "%s: %+v", file, rep)
		require.Len(t, rep.Checks, n, file)
	}
}

package rollout

import (
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/sandbox"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// goAgent answers every turn with the action "go".
type goAgent struct{}

func (goAgent) Name() string { return "test:go" }

func (goAgent) Chat(context.Context, model.Request) (model.Response, error) {
	return model.Response{Choices: []model.Choice{{Message: model.Message{Role: model.RoleAssistant, Content: "go"}}}}, nil
}

// TestPlayNonFiniteReward checks that a NaN or infinite step reward, or a
// return that overflows, ends the play as a failed play (a loss with its
// finite return so far) instead of storing a non-finite return, which made
// the labels' means NaN and the grpo stage refuse the round for good.
func TestPlayNonFiniteReward(t *testing.T) {
	sb, err := sandbox.New(sandbox.Config{Workers: 1, CallTimeout: 3 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { sb.Close() })
	cfg := config.Default()
	for name, rewards := range map[string][3]string{
		"nan":      {"0.5", `float("nan")`, "non-finite reward NaN"},
		"inf":      {"0.5", `float("-inf")`, "non-finite reward -Inf"},
		"overflow": {"1e308", "1e308", "reward 1e+308 makes the return overflow"},
	} {
		t.Run(name, func(t *testing.T) {
			src := `from spade_env import Env


class Bad(Env):
    max_turns = 5
    reward_range = (0.0, 1.5e308)  # wide enough for the overflow case

    def reset(self, seed=None):
        super().reset(seed)
        self.t = 0
        return "Valid actions: go", {}

    def step(self, action):
        self.t += 1
        r = ` + rewards[0] + ` if self.t == 1 else ` + rewards[1] + `
        return "Valid actions: go", r, False, False, {"success": True}
`
			prog, err := sb.Load(context.Background(), src)
			require.NoError(t, err)
			defer prog.Close()
			r := schemas.Rollout{EnvID: "bad", Seed: 1}
			Play(context.Background(), &cfg, goAgent{}, prog, Target{EnvID: "bad", Source: src, MaxTurns: 5}, false, &r)
			require.Contains(t, r.Error, rewards[2])
			require.False(t, r.Success)
			require.False(t, math.IsNaN(r.Return) || math.IsInf(r.Return, 0), "return %v", r.Return)
			require.Equal(t, int64(1), r.Turns)
			require.Len(t, r.StepRewards, 1)
			require.Equal(t, r.StepRewards[0], r.Return)
		})
	}
}

// TestSuccess checks the win rule of docs/regret.md: info["success"] when
// it is a boolean, else return > 0 (null, a missing key, another type or
// no info at all fall back to the return).
func TestSuccess(t *testing.T) {
	for _, c := range []struct {
		info string
		ret  float64
		want bool
	}{
		{`{"success": true}`, 0, true},
		{`{"success": false}`, 1, false},
		{`{"success": null}`, 1, true},
		{`{"success": null}`, 0, false},
		{`{"success": "yes"}`, 0, false},
		{`{"success": 1}`, 1, true},
		{`{}`, 1, true},
		{`{}`, 0, false},
		{``, 0.5, true},
	} {
		require.Equal(t, c.want, success(json.RawMessage(c.info), c.ret, false), "info %s return %v", c.info, c.ret)
	}
	// A play the harness cut (turn limit, context bound) is a loss unless
	// the environment reported success: a positive return is progress.
	require.False(t, success(json.RawMessage(`{}`), 0.8, true))
	require.False(t, success(nil, 0.8, true))
	require.True(t, success(json.RawMessage(`{"success": true}`), 0.8, true))
	require.False(t, success(json.RawMessage(`{"success": false}`), 0.8, true))
}

// TestPlayEnforcesContract: a program can tell the validator's seeds (0, 1,
// 2) from a play's and keep the contract only under validation, so Play
// checks what the validator checks on every step: a reward outside the
// reward_range (the validated one, else the program's declared one) or an
// observation over 16 KiB ends the play as an environment failure with the
// return so far.
func TestPlayEnforcesContract(t *testing.T) {
	sb, err := sandbox.New(sandbox.Config{Workers: 1, CallTimeout: 3 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { sb.Close() })
	cfg := config.Default()
	const src = `from spade_env import Env


class TwoFaced(Env):
    max_turns = 5
    reward_range = (0.0, 1.0)

    def reset(self, seed=None):
        super().reset(seed)
        self.seed, self.t = seed, 0
        big = seed == 1 << 40
        return ("x" * 20000 if big else "") + "Valid actions: go", {}

    def step(self, action):
        self.t += 1
        if self.seed < 10 or self.t == 1:
            return "Valid actions: go", 0.5, False, False, {}
        if self.seed == 1 << 41:
            return "x" * 20000, 0.0, False, False, {}
        return "Valid actions: go", 1000.0, True, False, {"success": True}
`
	for _, tc := range []struct {
		name   string
		seed   int64
		rr     []float64
		err    string
		turns  int64
		ret    float64
		errNil bool
	}{
		{name: "validator seed", seed: 1, rr: []float64{0, 1}, errNil: true, turns: 5, ret: 2.5},
		{name: "reward, validated range", seed: 1 << 33, rr: []float64{0, 1}, err: "env step: reward 1000 outside reward_range [0, 1]", turns: 1, ret: 0.5},
		{name: "reward, pool row", seed: 1 << 33, err: "env step: reward 1000 outside reward_range [0, 1]", turns: 1, ret: 0.5},
		{name: "reward, wider validated range", seed: 1 << 33, rr: []float64{0, 1000}, errNil: true, turns: 2, ret: 1000.5},
		{name: "reset observation", seed: 1 << 40, rr: []float64{0, 1}, err: "env reset: observation of 20017 bytes exceeds 16384"},
		{name: "step observation", seed: 1 << 41, rr: []float64{0, 1}, err: "env step: observation of 20000 bytes exceeds 16384", turns: 1, ret: 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prog, err := sb.Load(context.Background(), src)
			require.NoError(t, err)
			defer prog.Close()
			r := schemas.Rollout{EnvID: "two", Seed: tc.seed}
			Play(context.Background(), &cfg, goAgent{}, prog, Target{EnvID: "two", Source: src, MaxTurns: 5, RewardRange: tc.rr}, false, &r)
			if tc.errNil {
				require.Empty(t, r.Error)
			} else {
				require.Equal(t, tc.err, r.Error)
			}
			require.Equal(t, tc.turns, r.Turns)
			require.Equal(t, tc.ret, r.Return)
		})
	}
}

// TestCutAtMaxTurnsIsALoss: a 10-turn environment that pays 0.1 a step
// and never reports success, cut at rollout.max_turns 8, is a loss with
// return 0.8 (it was a win before: positive return); played to its own
// end (truncated by the environment at turn 10) the positive-return rule
// still holds.
func TestCutAtMaxTurnsIsALoss(t *testing.T) {
	sb, err := sandbox.New(sandbox.Config{Workers: 1, CallTimeout: 3 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { sb.Close() })
	src := `from spade_env import Env


class Long(Env):
    max_turns = 10
    reward_range = (0.0, 1.0)

    def reset(self, seed=None):
        super().reset(seed)
        self.t = 0
        return "Valid actions: go", {}

    def step(self, action):
        self.t += 1
        return "Valid actions: go", 0.1, False, self.t >= 10, {}
`
	prog, err := sb.Load(context.Background(), src)
	require.NoError(t, err)
	defer prog.Close()
	for _, tc := range []struct {
		maxTurns int
		term     string
		turns    int64
		win      bool
	}{{8, "max_turns", 8, false}, {12, "truncated", 10, true}} {
		cfg := config.Default()
		cfg.Rollout.MaxTurns = tc.maxTurns
		r := schemas.Rollout{EnvID: "long", Seed: 1}
		Play(context.Background(), &cfg, goAgent{}, prog, Target{EnvID: "long", Source: src, MaxTurns: 10}, false, &r)
		require.Empty(t, r.Error)
		require.Equal(t, tc.term, r.Termination)
		require.Equal(t, tc.turns, r.Turns)
		require.True(t, r.Truncated)
		require.Positive(t, r.Return)
		require.Equal(t, tc.win, r.Success, "max_turns %d", tc.maxTurns)
		require.Equal(t, r.Turns, int64(len(r.Replies)))
	}
}

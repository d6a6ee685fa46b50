package rollout

import (
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/stages/model"
	"github.com/spade-pipeline/spade/stages/sandbox"
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
		require.Equal(t, c.want, success(json.RawMessage(c.info), c.ret), "info %s return %v", c.info, c.ret)
	}
}

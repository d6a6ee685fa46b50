package rollout

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/sandbox"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// leakySource keeps state outside its instances, which a program process
// shared by several plays would carry from one play to the next: a module
// global, a module-level list and a class attribute, all changed in step,
// and a file in /tmp. Every step reports them in its observation and
// reward.
const leakySource = `import os

from spade_env import Env

CALLS = 0
SEEN = []


class Leaky(Env):
    max_turns = 3
    reward_range = (0.0, 100.0)
    history = []

    def reset(self, seed=None):
        super().reset(seed)
        return "Valid actions: go", {}

    def step(self, action):
        global CALLS
        CALLS += 1
        SEEN.append(action)
        Leaky.history.append(CALLS)
        with open("/tmp/leaky", "a") as f:
            f.write("x")
        size = os.path.getsize("/tmp/leaky")
        obs = f"calls {CALLS} seen {len(SEEN)} history {len(Leaky.history)} file {size}. Valid actions: go"
        return obs, float(CALLS), False, False, {}
`

// TestPlaysDoNotSeeEachOther: every play of an environment that mutates
// module-level and class state (and a file) in step starts from the
// program as loaded, never from what an earlier play in the same slot or a
// concurrent play left: the same observations and rewards for every play,
// whether the plays run one after another in one sandbox slot (where a
// reused program process would leak) or several at once.
func TestPlaysDoNotSeeEachOther(t *testing.T) {
	cfg := config.Default()
	env := &pipeline.Env{Config: &cfg, Round: pipeline.RoundInfo{Run: "t", Round: 1, Seed: 7}}
	target := Target{EnvID: "leaky", Source: leakySource, MaxTurns: 3, RewardRange: []float64{0, 100}}
	for _, slots := range []int{1, 4} {
		t.Run(fmt.Sprintf("slots=%d", slots), func(t *testing.T) {
			sb, err := sandbox.New(sandbox.Config{Workers: slots, CallTimeout: 10 * time.Second})
			require.NoError(t, err)
			t.Cleanup(func() { sb.Close() })
			const plays = 8
			rows := make([]schemas.Rollout, plays)
			var wg sync.WaitGroup
			sem := make(chan struct{}, slots)
			for i := range plays {
				wg.Go(func() {
					sem <- struct{}{}
					defer func() { <-sem }()
					rows[i] = playOne(context.Background(), env, goAgent{}, sb, gate{}, play{t: target, sample: i})
				})
			}
			wg.Wait()
			for i, r := range rows {
				require.Empty(t, r.Error, "play %d", i)
				require.Equal(t, []float64{1, 2, 3}, r.StepRewards, "play %d saw another play's module state", i)
				var obs []string
				for _, m := range r.Messages {
					if m.Role == "user" {
						obs = append(obs, m.Content)
					}
				}
				require.Equal(t, []string{
					"Valid actions: go",
					"calls 1 seen 1 history 1 file 1. Valid actions: go",
					"calls 2 seen 2 history 2 file 2. Valid actions: go",
					"calls 3 seen 3 history 3 file 3. Valid actions: go",
				}, obs, "play %d", i)
			}
		})
	}
}

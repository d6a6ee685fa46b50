package draw_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/draw"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// TestDraw checks the fixed-pool draw: all of the pool in design mode and
// when it is no larger than sample.slots; otherwise n per round, in the
// pool's order, without replacement inside an epoch of floor(N/n)
// rounds, the same for the same seed and another order for another
// epoch or seed.
func TestDraw(t *testing.T) {
	var envs []schemas.PoolEnv
	for i := range 7 {
		envs = append(envs, schemas.PoolEnv{EnvID: fmt.Sprintf("e%02d", 6-i)})
	}
	c := config.Default()
	c.Sample.Slots = 3
	ri := func(r int, c *config.Config) pipeline.RoundInfo { return pipeline.NewRoundInfo("x", r, c) }
	require.Equal(t, envs, draw.Pool(envs, ri(2, &c), draw.PoolSize(c.Design, c.Sample)), "design mode plays the whole pool")
	require.Zero(t, draw.PoolSize(c.Design, c.Sample))

	c.Design.Mode = config.DesignModeFixedPool
	require.Equal(t, 3, draw.PoolSize(c.Design, c.Sample))
	require.False(t, ri(1, &c).Regeneration)
	require.Equal(t, envs[:3], draw.Pool(envs[:3], ri(1, &c), draw.PoolSize(c.Design, c.Sample)), "a pool no larger than the draw is played whole")

	ids := func(ps []schemas.PoolEnv) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.EnvID)
		}
		return out
	}
	index := map[string]int{}
	for i, e := range envs {
		index[e.EnvID] = i
	}
	var epochs [][]string
	for r := 1; r <= 6; r++ { // epochs of floor(7/3) = 2 rounds
		got := draw.Pool(envs, ri(r, &c), draw.PoolSize(c.Design, c.Sample))
		require.Len(t, got, 3, "round %d", r)
		for i := 1; i < len(got); i++ {
			require.Less(t, index[got[i-1].EnvID], index[got[i].EnvID], "round %d keeps the pool's order", r)
		}
		require.Equal(t, got, draw.Pool(envs, ri(r, &c), draw.PoolSize(c.Design, c.Sample)), "round %d is deterministic", r)
		if r%2 == 1 {
			epochs = append(epochs, nil)
		}
		epochs[len(epochs)-1] = append(epochs[len(epochs)-1], ids(got)...)
	}
	for e, played := range epochs {
		seen := map[string]bool{}
		for _, id := range played {
			require.False(t, seen[id], "epoch %d plays %s twice: %v", e, id, played)
			seen[id] = true
		}
	}
	require.NotEqual(t, epochs[0], epochs[1], "each epoch has its own order")
	c2 := c
	c2.Seed = 99
	require.NotEqual(t, ids(draw.Pool(envs, ri(1, &c), draw.PoolSize(c.Design, c.Sample))), ids(draw.Pool(envs, ri(1, &c2), draw.PoolSize(c2.Design, c2.Sample))), "another seed, another draw")
}

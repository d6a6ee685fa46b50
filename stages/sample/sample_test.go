package sample

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline/config"
)

var sixSkills = config.Default().Sample.Skills

// TestActiveSkills checks the round-robin curriculum (docs/method.md step 2):
// over a full cycle of regenerations every skill is active equally often,
// each window has distinct skills, and consecutive windows differ.
func TestActiveSkills(t *testing.T) {
	for _, tc := range []struct {
		name          string
		active, regen int
		// perSkill is how often each skill must be active over regen
		// regenerations 0..regen-1.
		perSkill int
	}{
		{"3 of 6 over 2 regenerations", 3, 2, 1},
		{"3 of 6 over 4 regenerations", 3, 4, 2},
		{"2 of 6 over 3 regenerations", 2, 3, 1},
		{"4 of 6 over 3 regenerations", 4, 3, 2},
		{"6 of 6 over 1 regeneration", 6, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			count := map[string]int{}
			var prev []string
			for g := 0; g < tc.regen; g++ {
				w := ActiveSkills(sixSkills, tc.active, g)
				require.Len(t, w, tc.active)
				seen := map[string]bool{}
				for _, s := range w {
					require.False(t, seen[s], "regeneration %d activates %s twice: %v", g, s, w)
					seen[s] = true
					count[s]++
				}
				if prev != nil && tc.active < len(sixSkills) {
					require.NotEqual(t, prev, w, "regenerations %d and %d have the same active skills", g-1, g)
				}
				prev = w
			}
			for _, s := range sixSkills {
				require.Equal(t, tc.perSkill, count[s], "skill %s active %d times over %d regenerations", s, count[s], tc.regen)
			}
		})
	}
	// The first two regenerations of the default curriculum split the six
	// skills in two halves, in configured order.
	require.Equal(t, sixSkills[:3], ActiveSkills(sixSkills, 3, 0))
	require.Equal(t, sixSkills[3:], ActiveSkills(sixSkills, 3, 1))
	require.Equal(t, sixSkills[:3], ActiveSkills(sixSkills, 3, 2), "the window wraps around")
}

// TestSlotLayout checks that slots cycle through the active skills, that
// the game kinds cycle per pass over the skills, and that with setting
// mixed every tool_use_every-th slot is tool use.
func TestSlotLayout(t *testing.T) {
	active := []string{"a", "b", "c"}
	type slot struct{ skill, setting, kind string }
	for _, tc := range []struct {
		name    string
		setting string
		every   int
		want    []slot
	}{
		{"game", "game", 4, []slot{
			{"a", "game", "game"}, {"b", "game", "game"}, {"c", "game", "game"},
			{"a", "game", "grounded"}, {"b", "game", "grounded"}, {"c", "game", "grounded"},
			{"a", "game", "reasoning"}, {"b", "game", "reasoning"}, {"c", "game", "reasoning"},
			{"a", "game", "game"},
		}},
		{"mixed every 4th", "mixed", 4, []slot{
			{"a", "game", "game"}, {"b", "game", "game"}, {"c", "game", "game"},
			{"a", "tool_use", "tooluse"}, {"b", "game", "grounded"}, {"c", "game", "grounded"},
			{"a", "game", "reasoning"}, {"b", "tool_use", "tooluse"}, {"c", "game", "reasoning"},
			{"a", "game", "game"},
		}},
		{"mixed every 2nd", "mixed", 2, []slot{
			{"a", "game", "game"}, {"b", "tool_use", "tooluse"}, {"c", "game", "game"},
			{"a", "tool_use", "tooluse"},
		}},
		{"tool use only", "tool_use", 4, []slot{
			{"a", "tool_use", "tooluse"}, {"b", "tool_use", "tooluse"}, {"c", "tool_use", "tooluse"},
			{"a", "tool_use", "tooluse"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config.Sample{Setting: tc.setting, ToolUseEvery: tc.every}
			for i, w := range tc.want {
				skill, setting, kind := SlotLayout(&c, active, i)
				require.Equal(t, w, slot{skill, setting, kind}, "slot %d", i)
			}
		})
	}
}

// TestSlotLayoutSkillBalance: over a regeneration of 24 slots (the paper's
// batch) every active skill gets the same number of slots.
func TestSlotLayoutSkillBalance(t *testing.T) {
	c := config.Default().Sample
	active := ActiveSkills(c.Skills, c.ActiveSkills, 0)
	count := map[string]int{}
	tool := 0
	for i := 0; i < c.Slots; i++ {
		skill, setting, _ := SlotLayout(&c, active, i)
		count[skill]++
		if setting == "tool_use" {
			tool++
		}
	}
	for _, s := range active {
		require.Equal(t, c.Slots/len(active), count[s], "skill %s", s)
	}
	require.Equal(t, c.Slots/c.ToolUseEvery, tool)
}

// TestSlotLayoutToolUseCoversSkills: when the number of active skills and
// tool_use_every share a factor, tool-use slots still visit every active
// skill equally often, and every skill keeps the same number of slots.
func TestSlotLayoutToolUseCoversSkills(t *testing.T) {
	for _, tc := range []struct{ active, every, slots int }{{2, 4, 16}, {2, 2, 8}, {4, 2, 16}, {6, 4, 48}, {3, 3, 18}} {
		t.Run(fmt.Sprintf("A=%d T=%d", tc.active, tc.every), func(t *testing.T) {
			active := config.Default().Sample.Skills[:tc.active]
			c := config.Sample{Setting: "mixed", ToolUseEvery: tc.every}
			tool, all := map[string]int{}, map[string]int{}
			for i := 0; i < tc.slots; i++ {
				skill, setting, _ := SlotLayout(&c, active, i)
				all[skill]++
				if setting == "tool_use" {
					tool[skill]++
				}
			}
			for _, s := range active {
				require.Equal(t, tc.slots/tc.active, all[s], "slots of %s: %v", s, all)
				require.Equal(t, tc.slots/tc.every/tc.active, tool[s], "tool-use slots of %s: %v", s, tool)
			}
		})
	}
}

// TestDrawRows checks that documents are drawn without replacement while
// there are enough, that every index is in range, that the draw is a pure
// function of the generator's seed, and that k > n cycles through a full
// permutation.
func TestDrawRows(t *testing.T) {
	for _, tc := range []struct {
		name string
		n, k int64
	}{
		{"few of many", 1000, 6},
		{"half", 20, 10},
		{"all", 7, 7},
		{"one", 1, 1},
		{"more than the corpus", 5, 12},
		{"none", 9, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := func() *rand.Rand { return rand.New(rand.NewPCG(42, 7)) }
			got := drawRows(rng(), tc.n, tc.k)
			require.Len(t, got, int(tc.k))
			require.Equal(t, got, drawRows(rng(), tc.n, tc.k), "same seed, same draw")
			m := min(tc.n, tc.k)
			seen := map[int64]bool{}
			for j, v := range got {
				require.True(t, v >= 0 && v < tc.n, "index %d = %d outside [0, %d)", j, v, tc.n)
				if int64(j) < m {
					require.False(t, seen[v], "index %d repeats row %d before the corpus is exhausted", j, v)
					seen[v] = true
				} else {
					require.Equal(t, got[int64(j)%m], v, "past n the draw cycles")
				}
			}
			if tc.k >= tc.n {
				require.Len(t, seen, int(tc.n), "k >= n must use every row")
			}
		})
	}
	a := drawRows(rand.New(rand.NewPCG(1, 2)), 1000, 20)
	b := drawRows(rand.New(rand.NewPCG(3, 4)), 1000, 20)
	require.NotEqual(t, a, b, "different seeds should draw different rows")
}

// TestDrawRowsUniform: Floyd's algorithm picks every row with the same
// probability; over many seeds each of 10 rows is drawn about k/n of the
// time (binomial, 5000 draws of 3 of 10: mean 1500, sd ~32).
func TestDrawRowsUniform(t *testing.T) {
	const n, k, trials = 10, 3, 5000
	count := make([]int, n)
	for s := uint64(0); s < trials; s++ {
		for _, v := range drawRows(rand.New(rand.NewPCG(s, 99)), n, k) {
			count[v]++
		}
	}
	for i, c := range count {
		require.InDelta(t, trials*k/n, c, 200, "row %d drawn %d times", i, c)
	}
}

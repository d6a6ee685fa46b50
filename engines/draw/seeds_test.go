package draw_test

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/draw"
	"github.com/spade-pipeline/spade/schemas"
)

func entry(seq int64, skill string, win, regret float64) schemas.MemoryEntry {
	return schemas.MemoryEntry{Seq: seq, EnvID: fmt.Sprintf("e%03d", seq), Skill: skill, WinRate: win, Regret: regret}
}

func ids(es []schemas.MemoryEntry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.EnvID)
	}
	return out
}

// TestSeedsFilters checks which entries can be positives and
// negatives: the skill, the inclusive [0.15, 0.85] window, and the strict
// < 0.1 / > 0.9 negative bounds (0.1..0.15 and 0.85..0.9 are neither).
func TestSeedsFilters(t *testing.T) {
	mem := []schemas.MemoryEntry{
		entry(0, "planning", 0.15, 0.1),  // positive (low bound inclusive)
		entry(1, "planning", 0.85, 0.2),  // positive (high bound inclusive)
		entry(2, "planning", 0.5, 0.3),   // positive
		entry(3, "planning", 0.12, 0.9),  // neither
		entry(4, "planning", 0.88, 0.9),  // neither
		entry(5, "planning", 0.1, 0.9),   // neither (0.1 is not < 0.1)
		entry(6, "planning", 0.9, 0.9),   // neither (0.9 is not > 0.9)
		entry(7, "planning", 0.0, 0.0),   // negative
		entry(8, "planning", 1.0, -0.1),  // negative
		entry(9, "planning", 0.05, 0.0),  // negative
		entry(10, "spatial", 0.5, 0.99),  // other skill
		entry(11, "spatial", 0.0, 0.0),   // other skill negative
		entry(12, "planning", 0.95, 0.0), // negative, newest
	}
	seeds, neg := draw.Seeds(mem, "planning", 10, rand.New(rand.NewPCG(1, 2)))
	require.ElementsMatch(t, []string{"e000", "e001", "e002"}, ids(seeds))
	require.Equal(t, []string{"e002", "e001", "e000"}, ids(seeds), "seeds are shown highest regret first")
	require.Equal(t, []string{"e012", "e009", "e008", "e007"}, ids(neg), "negatives are newest first")

	_, neg = draw.Seeds(mem, "planning", 2, rand.New(rand.NewPCG(1, 2)))
	require.Equal(t, []string{"e012", "e009"}, ids(neg), "at most n negatives")

	seeds, neg = draw.Seeds(mem, "causal_inference", 2, rand.New(rand.NewPCG(1, 2)))
	require.Empty(t, seeds)
	require.Empty(t, neg)
	seeds, neg = draw.Seeds(nil, "planning", 2, rand.New(rand.NewPCG(1, 2)))
	require.Empty(t, seeds)
	require.Empty(t, neg)
}

// TestSeedsTop checks the public code's rule: n seeds drawn from the
// top max(3n, 10) positives by regret, every top entry reachable, none
// below it ever drawn, and the draw a pure function of the generator.
func TestSeedsTop(t *testing.T) {
	// 40 positives of the skill with distinct regrets (seq i has regret
	// i/100, so the top k are the k highest seqs), plus noise of another
	// skill with higher regrets.
	var mem []schemas.MemoryEntry
	for i := int64(0); i < 40; i++ {
		mem = append(mem, entry(i, "planning", 0.5, float64(i)/100))
		mem = append(mem, entry(100+i, "spatial", 0.5, 1+float64(i)))
	}
	sort.Slice(mem, func(a, b int) bool { return mem[a].Seq < mem[b].Seq })
	for _, tc := range []struct {
		name string
		n    int
		top  int
	}{
		{"n=1 top 10", 1, 10},
		{"n=2 top 10", 2, 10},
		{"n=3 top 10", 3, 10},
		{"n=4 top 12", 4, 12},
		{"n=8 top 24", 8, 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits := map[string]int{}
			for s := uint64(0); s < 400; s++ {
				seeds, _ := draw.Seeds(mem, "planning", tc.n, rand.New(rand.NewPCG(s, 5)))
				require.Len(t, seeds, tc.n)
				again, _ := draw.Seeds(mem, "planning", tc.n, rand.New(rand.NewPCG(s, 5)))
				require.Equal(t, seeds, again, "same generator seed, same seeds")
				seen := map[string]bool{}
				for j, e := range seeds {
					require.Equal(t, "planning", e.Skill)
					require.GreaterOrEqual(t, e.Seq, int64(40-tc.top), "seed %s is outside the top %d by regret", e.EnvID, tc.top)
					require.False(t, seen[e.EnvID], "seed %s drawn twice", e.EnvID)
					seen[e.EnvID] = true
					if j > 0 {
						require.GreaterOrEqual(t, seeds[j-1].Regret, e.Regret, "seeds are sorted by regret")
					}
					hits[e.EnvID]++
				}
			}
			require.Len(t, hits, tc.top, "every entry of the top %d must be drawable", tc.top)
		})
	}
}

// TestSeedsTies: equal regrets prefer the newest entry for the top.
func TestSeedsTies(t *testing.T) {
	var mem []schemas.MemoryEntry
	for i := int64(0); i < 15; i++ {
		mem = append(mem, entry(i, "planning", 0.5, 0.25))
	}
	for s := uint64(0); s < 100; s++ {
		seeds, _ := draw.Seeds(mem, "planning", 3, rand.New(rand.NewPCG(s, 0)))
		for _, e := range seeds {
			require.GreaterOrEqual(t, e.Seq, int64(5), "ties are broken by newest first; top 10 of 15 are seq 5..14")
		}
	}
}

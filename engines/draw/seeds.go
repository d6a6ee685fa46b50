package draw

import (
	"math/rand/v2"
	"sort"

	"github.com/spade-pipeline/spade/schemas"
)

// Seed selection bounds (docs/method.md step 7, following the public code):
// positives keep win rate in [PositiveLow, PositiveHigh]; negatives have
// win rate < NegativeBelow or > NegativeAbove.
const (
	PositiveLow   = 0.15
	PositiveHigh  = 0.85
	NegativeBelow = 0.1
	NegativeAbove = 0.9
)

// Seeds picks the memory examples shown to the designer for one slot
// of skill: from entries of that skill with win rate in [0.15, 0.85],
// sorted by regret (highest first, ties by newest), it samples n from the
// top max(3n, 10) without replacement; negatives are up to n entries of the
// skill with win rate < 0.1 or > 0.9, newest first. rng makes the draw
// deterministic per slot.
func Seeds(mem []schemas.MemoryEntry, skill string, n int, rng *rand.Rand) (seeds, negatives []schemas.MemoryEntry) {
	var pos, neg []schemas.MemoryEntry
	for _, e := range mem {
		if e.Skill != skill {
			continue
		}
		switch {
		case e.WinRate >= PositiveLow && e.WinRate <= PositiveHigh:
			pos = append(pos, e)
		case e.WinRate < NegativeBelow || e.WinRate > NegativeAbove:
			neg = append(neg, e)
		}
	}
	sort.SliceStable(pos, func(a, b int) bool {
		if pos[a].Regret != pos[b].Regret {
			return pos[a].Regret > pos[b].Regret
		}
		return pos[a].Seq > pos[b].Seq
	})
	top := pos[:min(len(pos), max(3*n, 10))]
	perm := rng.Perm(len(top))
	for _, i := range perm[:min(n, len(top))] {
		seeds = append(seeds, top[i])
	}
	sort.SliceStable(seeds, func(a, b int) bool { return seeds[a].Regret > seeds[b].Regret })
	sort.SliceStable(neg, func(a, b int) bool { return neg[a].Seq > neg[b].Seq })
	negatives = neg[:min(n, len(neg))]
	return seeds, negatives
}

package procedural

import (
	"hash/fnv"
	"math/rand/v2"
)

// persona is the agent's seeded imperfection: the play seed fixes how often
// it acts at random, how many past observations it reasons over and how
// deep its rule search goes. Varying these across the G plays of one
// environment is what spreads win rates into the learnable band instead of
// 0 or 1 (docs/method.md step 6).
type persona struct {
	// eps is the probability of a random valid action in a turn.
	eps float64
	// window is how many past (action, feedback) pairs constraint modules
	// (brackets, match counts, scan evidence) remember.
	window int
	// depth 1..5 gates reasoning modules: rule classes tried for sequences
	// and functions, value-per-cost and deadline reasoning.
	depth int
}

func mix(seed int64, salt string, a, b int) uint64 {
	h := fnv.New64a()
	var buf [8]byte
	for i := 0; i < 8; i++ {
		buf[i] = byte(uint64(seed) >> (8 * i))
	}
	h.Write(buf[:])
	h.Write([]byte(salt))
	for i, v := range []int{a, b} {
		for j := 0; j < 4; j++ {
			buf[j] = byte(uint32(v) >> (8 * j))
		}
		buf[4] = byte(i)
		h.Write(buf[:5])
	}
	return h.Sum64()
}

func newPersona(seed int64, choice int) persona {
	r := rand.New(rand.NewPCG(mix(seed, "persona", choice, 0), 0x9e3779b97f4a7c15))
	return persona{
		eps:    []float64{0.04, 0.08, 0.14, 0.22}[r.IntN(4)],
		window: 1 + r.IntN(5),
		depth:  1 + r.IntN(5),
	}
}

// turnRand is the randomness of one decision: a function of the play seed,
// the sample index and the turn, so replaying a conversation replays it.
func turnRand(seed int64, choice, turn int) *rand.Rand {
	return rand.New(rand.NewPCG(mix(seed, "turn", choice, turn), 0x2545f4914f6cdd1d))
}

package procedural

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// gen is the per-design parameter source: a seeded PCG (never the global
// rand, so designs replay byte for byte), the document terms still unused,
// and the difficulty level 1..5.
type gen struct {
	rng        *rand.Rand
	terms      Terms
	difficulty int
	nextName   int
	nextNumber int
}

// names takes the next n distinct names from the document terms. When the
// terms run out they are reused with a roman suffix, which keeps names
// distinct and still visibly derived from the document.
func (g *gen) names(n int) []string {
	out := make([]string, 0, n)
	for len(out) < n {
		i := g.nextName
		g.nextName++
		base := g.terms.Names[i%len(g.terms.Names)]
		if round := i / len(g.terms.Names); round > 0 {
			base = fmt.Sprintf("%s%s", base, []string{"", "Two", "Three", "Four", "Five"}[min(round, 4)])
		}
		out = append(out, base)
	}
	return out
}

// name takes one name.
func (g *gen) name() string { return g.names(1)[0] }

// number returns a document number inside [lo, hi] when one is left, else a
// seeded draw, so values echo the document where they can.
func (g *gen) number(lo, hi int) int {
	for g.nextNumber < len(g.terms.Numbers) {
		n := g.terms.Numbers[g.nextNumber]
		g.nextNumber++
		if n >= lo && n <= hi {
			return n
		}
	}
	return lo + g.rng.IntN(hi-lo+1)
}

// intn draws uniformly from [lo, hi].
func (g *gen) intn(lo, hi int) int { return lo + g.rng.IntN(hi-lo+1) }

// pick returns the value for the current difficulty from a 5-entry table.
func pick[T any](g *gen, table [5]T) T { return table[g.difficulty-1] }

// lowerWords is the lower-case form used in story phrases.
func lowerWords(s string) string { return strings.ToLower(s) }

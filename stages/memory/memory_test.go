package memory

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/schemas"
)

func entries(n int, firstSeq int64) []schemas.MemoryEntry {
	var out []schemas.MemoryEntry
	for i := 0; i < n; i++ {
		out = append(out, schemas.MemoryEntry{Seq: firstSeq + int64(i), EnvID: fmt.Sprintf("old%03d", i)})
	}
	return out
}

func fresh(n int) []schemas.MemoryEntry {
	var out []schemas.MemoryEntry
	for i := 0; i < n; i++ {
		// Seq is assigned by Append; a stale value must be overwritten.
		out = append(out, schemas.MemoryEntry{Seq: -7, EnvID: fmt.Sprintf("new%03d", i)})
	}
	return out
}

func seqs(mem []schemas.MemoryEntry) []int64 {
	var out []int64
	for _, e := range mem {
		out = append(out, e.Seq)
	}
	return out
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for s := from; s < to; s++ {
		out = append(out, s)
	}
	return out
}

// TestAppend checks the FIFO (SPADE.md step 7): Seq continues after the
// highest kept Seq, and beyond capacity the lowest Seq (oldest) goes first.
func TestAppend(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mem      []schemas.MemoryEntry
		add      int
		capacity int
		wantSeqs []int64
		// wantFirst is the env_id of the oldest entry kept.
		wantFirst string
	}{
		{"empty memory starts at 0", nil, 3, 200, seqRange(0, 3), "new000"},
		{"below capacity keeps all", entries(5, 0), 4, 200, seqRange(0, 9), "old000"},
		{"exactly full", entries(197, 0), 3, 200, seqRange(0, 200), "old000"},
		{"full memory evicts the oldest", entries(200, 0), 3, 200, seqRange(3, 203), "old003"},
		{"after earlier evictions seq continues", entries(200, 50), 6, 200, seqRange(56, 256), "old006"},
		{"more new entries than capacity keeps the newest", entries(4, 0), 12, 10, seqRange(6, 16), "new002"},
		{"nothing added", entries(3, 10), 0, 200, seqRange(10, 13), "old000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := append([]schemas.MemoryEntry(nil), tc.mem...)
			got := Append(tc.mem, fresh(tc.add), tc.capacity)
			require.Equal(t, tc.wantSeqs, seqs(got))
			require.LessOrEqual(t, len(got), tc.capacity)
			require.Equal(t, tc.wantFirst, got[0].EnvID)
			if tc.add > 0 {
				require.Equal(t, fmt.Sprintf("new%03d", tc.add-1), got[len(got)-1].EnvID, "the newest entry is last")
			}
			require.Equal(t, before, tc.mem, "Append must not modify its input")
		})
	}
}

// TestAppendRepeated simulates 20 regenerations of 24 entries into a
// memory of 200: the memory always holds the last min(total, 200) inserts.
func TestAppendRepeated(t *testing.T) {
	var mem []schemas.MemoryEntry
	total := 0
	for g := 0; g < 20; g++ {
		mem = Append(mem, fresh(24), 200)
		total += 24
		keep := min(total, 200)
		require.Equal(t, seqRange(int64(total-keep), int64(total)), seqs(mem), "regeneration %d", g)
	}
}

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

// TestSelectSeedsFilters checks which entries can be positives and
// negatives: the skill, the inclusive [0.15, 0.85] window, and the strict
// < 0.1 / > 0.9 negative bounds (0.1..0.15 and 0.85..0.9 are neither).
func TestSelectSeedsFilters(t *testing.T) {
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
	seeds, neg := SelectSeeds(mem, "planning", 10, rand.New(rand.NewPCG(1, 2)))
	require.ElementsMatch(t, []string{"e000", "e001", "e002"}, ids(seeds))
	require.Equal(t, []string{"e002", "e001", "e000"}, ids(seeds), "seeds are shown highest regret first")
	require.Equal(t, []string{"e012", "e009", "e008", "e007"}, ids(neg), "negatives are newest first")

	_, neg = SelectSeeds(mem, "planning", 2, rand.New(rand.NewPCG(1, 2)))
	require.Equal(t, []string{"e012", "e009"}, ids(neg), "at most n negatives")

	seeds, neg = SelectSeeds(mem, "causal_inference", 2, rand.New(rand.NewPCG(1, 2)))
	require.Empty(t, seeds)
	require.Empty(t, neg)
	seeds, neg = SelectSeeds(nil, "planning", 2, rand.New(rand.NewPCG(1, 2)))
	require.Empty(t, seeds)
	require.Empty(t, neg)
}

// TestSelectSeedsTop checks the public code's rule: n seeds drawn from the
// top max(3n, 10) positives by regret, every top entry reachable, none
// below it ever drawn, and the draw a pure function of the generator.
func TestSelectSeedsTop(t *testing.T) {
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
				seeds, _ := SelectSeeds(mem, "planning", tc.n, rand.New(rand.NewPCG(s, 5)))
				require.Len(t, seeds, tc.n)
				again, _ := SelectSeeds(mem, "planning", tc.n, rand.New(rand.NewPCG(s, 5)))
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

// TestSelectSeedsTies: equal regrets prefer the newest entry for the top.
func TestSelectSeedsTies(t *testing.T) {
	var mem []schemas.MemoryEntry
	for i := int64(0); i < 15; i++ {
		mem = append(mem, entry(i, "planning", 0.5, 0.25))
	}
	for s := uint64(0); s < 100; s++ {
		seeds, _ := SelectSeeds(mem, "planning", 3, rand.New(rand.NewPCG(s, 0)))
		for _, e := range seeds {
			require.GreaterOrEqual(t, e.Seq, int64(5), "ties are broken by newest first; top 10 of 15 are seq 5..14")
		}
	}
}

const proceduralSource = `from spade_env import Env

# Generated by procedural:v1, a deterministic offline stand-in for an LLM designer (not a language model).
SPADE_PROCEDURAL = {"family":"faulty_component","difficulty":3,"version":1,"params":{"line":"PressureTwo","max_turns":5}}
PARAMS = SPADE_PROCEDURAL["params"]


class FaultyComponentPressureEnv(Env):
    """Find the one faulty stage of a processing line
    by measuring the signal."""

    name = "faulty_component_pressure"
    skill = "causal_inference"
    max_turns = 5
`

const llmSource = `import random
from spade_env import Env

class LanternEnv(Env):
    '''Light the lanterns in the right order.'''
    name: str = 'lantern_order'
    max_turns = 12
`

func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		name, source, skill string
		family              string
		difficulty          int64
		summary             string
	}{
		{"procedural marker", proceduralSource, "causal_inference", "faulty_component", 3,
			"faulty_component_pressure (causal_inference) Find the one faulty stage of a processing line by measuring the signal."},
		{"LLM-written class: name attribute and docstring", llmSource, "planning", "lantern_order", 0,
			"lantern_order (planning) Light the lanterns in the right order."},
		{"nothing recognisable", "print('hi')\n", "planning", "", 0, "(planning)"},
		{"single-quoted marker keys", "X = {'family': 'grid-scan', 'difficulty': 5}\n", "spatial_reasoning", "grid-scan", 5, "(spatial_reasoning)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			family, diff, summary := Describe(tc.source, tc.skill)
			require.Equal(t, tc.family, family)
			require.Equal(t, tc.difficulty, diff)
			require.Equal(t, tc.summary, summary)
		})
	}
}

// FuzzDescribe: Describe reads LLM-written source (untrusted text); it
// must never panic and must keep the summary bounded.
func FuzzDescribe(f *testing.F) {
	f.Add(proceduralSource, "causal_inference")
	f.Add(llmSource, "planning")
	f.Add(`"family": "x", "difficulty": 99999999999999999999999`, "s")
	f.Add("class A(B):\n  \"\"\"unterminated", "s")
	f.Add("class A(B):\n    \"\"\"x"+strings.Repeat("é", 150)+"\"\"\"\n", "s")
	f.Fuzz(func(t *testing.T, source, skill string) {
		_, diff, summary := Describe(source, skill)
		if diff < 0 {
			t.Fatalf("negative difficulty %d", diff)
		}
		// name + " (" + skill + ") " + docstring of at most 200 bytes.
		if len(summary) > len(source)+len(skill)+204 {
			t.Fatalf("summary of %d bytes from %d bytes of source", len(summary), len(source))
		}
		// Summaries are stored in a Parquet string column that DuckDB
		// reads as UTF-8: truncation must not split a character.
		if utf8.ValidString(source) && utf8.ValidString(skill) && !utf8.ValidString(summary) {
			t.Fatalf("summary %q of valid UTF-8 source is not valid UTF-8", summary)
		}
	})
}

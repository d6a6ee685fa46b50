package procedural

import (
	"fmt"
	"sort"
	"strings"
	"testing"
)

// famResult is the win rate and mean return of one family at one difficulty
// over the test seeds, unhinted and hinted.
type famResult struct {
	family               string
	difficulty           int
	winPlain, winHint    float64
	meanPlain, meanHint  float64
	maxTurns, worstTurns int
}

const playsPerEnv = 8

func rolloutFamily(t *testing.T, b *Backend, fam family, diff int, docs []Document, slot string) famResult {
	t.Helper()
	spec := designSpec{kind: "game", skill: fam.skill, setting: "game", slot: slot, docs: docs}
	if fam.toolUse {
		spec.kind, spec.setting, spec.skill = "tooluse", "tool_use", "planning"
	}
	d, err := renderFamily(spec, fam, diff, 0, false)
	if err != nil {
		t.Fatalf("render %s/%d: %v", fam.name, diff, err)
	}
	hint := WriteHint(d.source)
	drv := startDriver(t, d.source)
	r := famResult{family: fam.name, difficulty: diff, maxTurns: drv.maxTurns}
	for i := 0; i < playsPerEnv; i++ {
		seed := int64(1000*diff + 17*i + 3)
		for _, hinted := range []bool{false, true} {
			h := ""
			if hinted {
				h = hint
			}
			p := play(t, b, drv, seed, h)
			if !p.ended {
				t.Errorf("%s/%d seed %d: no termination within max_turns %d", fam.name, diff, seed, drv.maxTurns)
			}
			r.worstTurns = max(r.worstTurns, p.turns)
			w := 0.0
			if p.success {
				w = 1
			}
			if hinted {
				r.winHint += w / playsPerEnv
				r.meanHint += p.ret / playsPerEnv
			} else {
				r.winPlain += w / playsPerEnv
				r.meanPlain += p.ret / playsPerEnv
			}
		}
	}
	return r
}

// TestRolloutWinRates plays every family at every difficulty 8 times
// unhinted and 8 times hinted with the procedural agent against the real
// spade_env contract, and checks the properties SPADE needs from an offline
// model: every play ends within max_turns, win rates are not all 0 or 1,
// a good share of environments sits in the learnable band, and hints raise
// the mean return on most families (positive regret).
func TestRolloutWinRates(t *testing.T) {
	needPython(t, true)
	if testing.Short() {
		t.Skip("plays ~2,000 episodes")
	}
	docs := loadDocs(t)
	b := New()
	var results []famResult
	for fi, fam := range families {
		for diff := 1; diff <= MaxDifficulty; diff++ {
			doc := docs[(fi+diff)%len(docs) : (fi+diff)%len(docs)+1]
			results = append(results, rolloutFamily(t, b, fam, diff, doc, fmt.Sprintf("slot-%02d", fi)))
		}
	}
	var table strings.Builder
	fmt.Fprintf(&table, "| family | d | max_turns | win | win+hint | return | return+hint | regret |\n|---|---|---|---|---|---|---|---|\n")
	inBand, total := 0, 0
	famRegret := map[string]float64{}
	famWins := map[string][]float64{}
	for _, r := range results {
		fmt.Fprintf(&table, "| %s | %d | %d | %s | %s | %s | %s | %+.2f |\n", r.family, r.difficulty, r.maxTurns,
			fmtRate(r.winPlain), fmtRate(r.winHint), fmtRate(r.meanPlain), fmtRate(r.meanHint), r.meanHint-r.meanPlain)
		total++
		if r.winPlain >= BandLow && r.winPlain <= BandHigh {
			inBand++
		}
		famRegret[r.family] += r.meanHint - r.meanPlain
		famWins[r.family] = append(famWins[r.family], r.winPlain)
		if r.worstTurns > r.maxTurns {
			t.Errorf("%s/%d: a play took %d turns, max_turns %d", r.family, r.difficulty, r.worstTurns, r.maxTurns)
		}
	}
	t.Logf("win rates over %d plays per cell:\n%s", playsPerEnv, table.String())
	positive := 0
	var names []string
	for f := range famRegret {
		names = append(names, f)
	}
	sort.Strings(names)
	for _, f := range names {
		if famRegret[f] > 0 {
			positive++
		}
		allSame := true
		for _, w := range famWins[f] {
			if w != famWins[f][0] {
				allSame = false
			}
		}
		if allSame && (famWins[f][0] == 0 || famWins[f][0] == 1) {
			t.Errorf("%s: win rate %v at every difficulty", f, famWins[f][0])
		}
	}
	t.Logf("learnable band: %d of %d family x difficulty cells; positive mean regret on %d of %d families", inBand, total, positive, len(names))
	if inBand*4 < total {
		t.Errorf("only %d of %d cells in the learnable band [%.1f, %.1f]", inBand, total, BandLow, BandHigh)
	}
	if positive*3 < len(names)*2 {
		t.Errorf("hints raise the mean return on only %d of %d families", positive, len(names))
	}
}

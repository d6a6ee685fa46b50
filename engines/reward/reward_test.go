package reward

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// The expected values are worked by hand from the formulas of
// docs/regret.md with the public recipes' parameters (blend 0.6 / 0.4,
// regret scale 0.15, plateau [0.4, 0.6], ramp 0.25).
func TestDesignerRewardFormulas(t *testing.T) {
	def := config.Default().Label
	with := func(kind string) config.Label { l := def; l.DesignerReward = kind; return l }
	noFloor := with(config.DesignerRewardBlend)
	noFloor.Blend.RegretFloor = false
	evenNoFloor := noFloor
	evenNoFloor.Blend.PlateauWeight, evenNoFloor.Blend.RegretWeight = 0.5, 0.5
	solveBlend := with(config.DesignerRewardBlend)
	solveBlend.Blend.PlateauWeight, solveBlend.Blend.RegretWeight = 1, 0
	cases := []struct {
		name string
		cfg  config.Label
		in   RewardInput
		want float64
		ok   bool
	}{
		// 0.6 x 1 + 0.4 x 0.06/0.15 = 0.6 + 0.16
		{"blend in band", with("blend"), RewardInput{Valid: true, Regret: ptr(0.06), Width: 1, WinRate: 0.5, Unhinted: 8}, 0.76, true},
		// plateau 1 - (0.4-0.25)/0.25 = 0.4; regret 0.3/0.15 = 2 clipped to 1: 0.24 + 0.4
		{"blend below band, regret clipped", with("blend"), RewardInput{Valid: true, Regret: ptr(0.3), Width: 1, WinRate: 0.25, Unhinted: 8}, 0.64, true},
		// plateau 1 - 0.275/0.25 < 0 -> 0; negative regret floored to 0
		{"blend too easy, negative regret floored", with("blend"), RewardInput{Valid: true, Regret: ptr(-0.2), Width: 1, WinRate: 0.875, Unhinted: 8}, 0, true},
		// width 2: regret 0.03/2/0.15 = 0.1; plateau 1 - 0.1/0.25 = 0.6: 0.36 + 0.04
		{"blend scaled by width", with("blend"), RewardInput{Valid: true, Regret: ptr(0.03), Width: 2, WinRate: 0.7, Unhinted: 8}, 0.40, true},
		// no floor: 0.6 x 0 + 0.4 x (-0.15/0.15) = -0.4 < 0: masked
		{"blend negative masked", noFloor, RewardInput{Valid: true, Regret: ptr(-0.15), Width: 1, WinRate: 0.1, Unhinted: 8}, 0, false},
		{"blend unmeasured without hint", with("blend"), RewardInput{Valid: true, Width: 1, WinRate: 0.5, Unhinted: 8}, 0, false},
		{"blend invalid", with("blend"), RewardInput{Valid: false}, -1, true},
		{"solve rate on the plateau", with("solve_rate"), RewardInput{Valid: true, WinRate: 0.45, Unhinted: 8}, 1, true},
		// 1 - (0.4-0.3)/0.25
		{"solve rate on the ramp", with("solve_rate"), RewardInput{Valid: true, WinRate: 0.3, Unhinted: 8}, 0.6, true},
		{"solve rate off the ramp", with("solve_rate"), RewardInput{Valid: true, WinRate: 0.95, Unhinted: 8}, 0, true},
		{"solve rate needs no hint but plays", with("solve_rate"), RewardInput{Valid: true, Unhinted: 0}, 0, false},
		{"learning potential above baseline", with("learning_potential"), RewardInput{Valid: true, WinRate: 0.75, Unhinted: 8, Baseline: 0.3}, 0.45, true},
		{"learning potential below baseline", with("learning_potential"), RewardInput{Valid: true, WinRate: 0.1, Unhinted: 8, Baseline: 0.3}, 0.2, true},
		{"learning potential invalid", with("learning_potential"), RewardInput{Valid: false}, -1, true},
		// regret 5 on [0, 10]: 0.5
		{"regret scaled", with("regret"), RewardInput{Valid: true, Regret: ptr(5), Width: 10, Unhinted: 8}, 0.5, true},
		{"regret clipped", with("regret"), RewardInput{Valid: true, Regret: ptr(-3), Width: 1, Unhinted: 8}, -1, true},
		{"empty kind is regret", with(""), RewardInput{Valid: true, Regret: ptr(0.25), Width: 0, Unhinted: 8}, 0.25, true},
		// Without the floor the scaled regret is not clipped: 0.6 x 1 + 0.4 x 0.3/0.15 = 0.6 + 0.8
		{"blend no floor, regret above the scale", noFloor, RewardInput{Valid: true, Regret: ptr(0.3), Width: 1, WinRate: 0.5, Unhinted: 8}, 1.4, true},
		// 0.6 x 1 + 0.4 x (-0.075/0.15) = 0.6 - 0.2: the plateau outweighs a misleading hint
		{"blend no floor, negative regret offset", noFloor, RewardInput{Valid: true, Regret: ptr(-0.075), Width: 1, WinRate: 0.5, Unhinted: 8}, 0.4, true},
		// weights 0.5 / 0.5: 0.5 x 1 + 0.5 x (-0.15/0.15) = 0.5 - 0.5 = 0 (exact in
		// binary): zero is kept, only < 0 is masked
		{"blend no floor, exactly zero kept", evenNoFloor, RewardInput{Valid: true, Regret: ptr(-0.15), Width: 1, WinRate: 0.5, Unhinted: 8}, 0, true},
		{"blend unmeasured without unhinted plays", with("blend"), RewardInput{Valid: true, Regret: ptr(0.1), Width: 1, Unhinted: 0}, 0, false},
		// infinite width counts 1: 0.6 x 1 + 0.4 x 0.03/0.15 = 0.6 + 0.08
		{"blend with an infinite width", with("blend"), RewardInput{Valid: true, Regret: ptr(0.03), Width: math.Inf(1), WinRate: 0.5, Unhinted: 8}, 0.68, true},
		// plateau edge: 0.6 is on the top (inclusive): 0.6 x 1 + 0.4 x 0
		{"blend at the plateau's upper edge", with("blend"), RewardInput{Valid: true, Regret: ptr(0), Width: 1, WinRate: 0.6, Unhinted: 5}, 0.6, true},
		// the public solve-rate launcher's blend: weights 1 and 0, so 1 x (1 - 0.1/0.25) + 0 x 1 = 0.6
		{"blend as the solve-rate launcher", solveBlend, RewardInput{Valid: true, Regret: ptr(0.5), Width: 1, WinRate: 0.3, Unhinted: 8}, 0.6, true},
		// 1 - (0.4 - 0.15)/0.25 = 0: the ramp's foot
		{"solve rate at the ramp's foot", with("solve_rate"), RewardInput{Valid: true, WinRate: 0.15, Unhinted: 8}, 0, true},
		{"solve rate invalid", with("solve_rate"), RewardInput{Valid: false, WinRate: 0.5, Unhinted: 8}, -1, true},
		// no earlier round: baseline 0, so |0.625 - 0|
		{"learning potential without history", with("learning_potential"), RewardInput{Valid: true, WinRate: 0.625, Unhinted: 8}, 0.625, true},
		{"learning potential needs plays", with("learning_potential"), RewardInput{Valid: true, Unhinted: 0, Baseline: 0.3}, 0, false},
		// regret of a 0..1 environment equal to its width: clip(1, -1, 1)
		{"regret at the clip", with("regret"), RewardInput{Valid: true, Regret: ptr(1), Width: 1, Unhinted: 8}, 1, true},
		{"regret unmeasured without hint", with("regret"), RewardInput{Valid: true, Width: 1, Unhinted: 8}, 0, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := DesignerRewardOf(tc.cfg, tc.in)
			require.Equal(t, tc.ok, ok)
			require.InDelta(t, tc.want, got, 1e-12)
		})
	}
}

func TestPlateau(t *testing.T) {
	for _, tc := range []struct{ wr, want float64 }{
		{0, 0}, {0.15, 0}, {0.2, 0.2}, {0.4, 1}, {0.5, 1}, {0.6, 1}, {0.7, 0.6}, {0.85, 0}, {1, 0},
	} {
		require.InDelta(t, tc.want, Plateau(tc.wr, 0.4, 0.6, 0.25), 1e-12, "win rate %g", tc.wr)
	}
}

// TestBaselines folds four rounds by hand with the recipes' rates (fast
// 0.98, slow 0.85): skill A has round means 0.5, 0.7, -, 0.1, so its slow
// average is 0.5, 0.15 x 0.5 + 0.85 x 0.7 = 0.67, then 0.15 x 0.67 + 0.85
// x 0.1 = 0.1855, and its fast one after round 2 is 0.02 x 0.5 + 0.98 x
// 0.7 = 0.696. Invalid and unplayed labels do not count.
func TestBaselines(t *testing.T) {
	lp := config.DefaultLearningPotential()
	l := func(skill string, valid bool, plays int64, wr float64) schemas.Label {
		return schemas.Label{Skill: skill, Valid: valid, Plays: plays, WinRate: wr}
	}
	rounds := [][]schemas.Label{
		{l("A", true, 16, 0.25), l("A", true, 16, 0.75), l("A", false, 16, 1), l("A", true, 0, 1), l("B", true, 16, 1)},
		{l("A", true, 8, 0.7)},
		{l("B", true, 8, 0)},
		{l("A", true, 8, 0.1)},
	}
	got := Baselines(rounds[:2], lp)
	require.InDelta(t, 0.67, got["A"].Baseline(), 1e-12)
	require.InDelta(t, 0.696, got["A"].Fast, 1e-12)
	got = Baselines(rounds, lp)
	require.InDelta(t, 0.1855, got["A"].Baseline(), 1e-12)
	require.Equal(t, 3, got["A"].Rounds)
	require.InDelta(t, 0.15, got["B"].Baseline(), 1e-12)
	require.Zero(t, Baselines(nil, lp)["A"].Baseline(), "no history: baseline 0")
}

func ptr(v float64) *float64 { return &v }

package label

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/metrics"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// play builds one rollout row; err marks a failed play.
func play(hinted bool, ret float64, success bool, err string) schemas.Rollout {
	return schemas.Rollout{EnvID: "e", Hinted: hinted, Return: ret, Success: success, Error: err}
}

// arm builds plays of one arm from returns; a return > 0 is a success.
func arm(hinted bool, returns ...float64) []schemas.Rollout {
	var out []schemas.Rollout
	for _, r := range returns {
		out = append(out, play(hinted, r, r > 0, ""))
	}
	return out
}

func cat(parts ...[]schemas.Rollout) []schemas.Rollout {
	var out []schemas.Rollout
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func ptr(v float64) *float64 { return &v }

var validCand = Candidate{EnvID: "e", SlotID: "r000001-s0000", Skill: "planning", Valid: true, RewardLow: 0, RewardHigh: 1}

func TestCompute(t *testing.T) {
	invalid := validCand
	invalid.Valid = false
	wide := validCand
	wide.RewardLow, wide.RewardHigh = -5, 5
	for _, tc := range []struct {
		name  string
		cand  Candidate
		plays []schemas.Rollout
		regen bool
		want  schemas.Label
	}{
		{
			name:  "means win rate and regret",
			cand:  validCand,
			plays: cat(arm(false, 1, 0, 0, 0, 1), arm(true, 1, 1, 1, 0, 1)),
			regen: true,
			want: schemas.Label{Plays: 10, UnhintedMean: 0.4, HintedMean: ptr(0.8), WinRate: 0.4,
				Regret: ptr(0.4), Learnable: true, Admitted: true, DesignerReward: ptr(0.4)},
		},
		{
			name: "win rate counts only unhinted successes",
			cand: validCand,
			// Hinted successes and unhinted non-successes with positive
			// partial returns do not raise the win rate.
			plays: cat([]schemas.Rollout{play(false, 0.5, false, ""), play(false, 0.5, false, ""), play(false, 1, true, ""), play(false, 0, false, "")},
				arm(true, 1, 1, 1, 1)),
			regen: true,
			want: schemas.Label{Plays: 8, UnhintedMean: 0.5, HintedMean: ptr(1), WinRate: 0.25,
				Regret: ptr(0.5), Learnable: true, Admitted: true, DesignerReward: ptr(0.5)},
		},
		{
			name: "a failed play flagged successful is still a loss",
			cand: validCand,
			plays: cat([]schemas.Rollout{play(false, 1, true, "env step: timeout"), play(false, 1, true, ""), play(false, 0, false, ""), play(false, 0, false, "")},
				arm(true, 1, 1, 0, 0)),
			regen: true,
			want: schemas.Label{Plays: 8, Errors: 1, UnhintedMean: 0.5, HintedMean: ptr(0.5), WinRate: 0.25,
				Regret: ptr(0), Learnable: true, Admitted: true, DesignerReward: ptr(0)},
		},
		{
			name: "solved environment: no regret, outside the band",
			cand: validCand, plays: cat(arm(false, 1, 1, 1, 1), arm(true, 1, 1, 1, 1)), regen: true,
			want: schemas.Label{Plays: 8, UnhintedMean: 1, HintedMean: ptr(1), WinRate: 1, Regret: ptr(0), DesignerReward: ptr(0)},
		},
		{
			name: "unsolvable environment: no regret, outside the band",
			cand: validCand, plays: cat(arm(false, 0, 0, 0, 0), arm(true, 0, 0, 0, 0)), regen: true,
			want: schemas.Label{Plays: 8, HintedMean: ptr(0), Regret: ptr(0), DesignerReward: ptr(0)},
		},
		{
			name: "band low bound is inclusive",
			cand: validCand, plays: cat(arm(false, 1, 0, 0, 0, 0), arm(true, 1, 1, 0, 0, 0)), regen: true,
			want: schemas.Label{Plays: 10, UnhintedMean: 0.2, HintedMean: ptr(0.4), WinRate: 0.2, Regret: ptr(0.4 - 0.2),
				Learnable: true, Admitted: true, DesignerReward: ptr(0.4 - 0.2)},
		},
		{
			name: "band high bound is inclusive",
			cand: validCand, plays: cat(arm(false, 1, 1, 1, 1, 0), arm(true, 1, 1, 1, 1, 1)), regen: true,
			want: schemas.Label{Plays: 10, UnhintedMean: 0.8, HintedMean: ptr(1), WinRate: 0.8, Regret: ptr(1 - 0.8),
				Learnable: true, Admitted: true, DesignerReward: ptr(1 - 0.8)},
		},
		{
			name: "just below the band",
			cand: validCand, plays: cat(arm(false, 1, 0, 0, 0, 0, 0), arm(true, 1, 1, 1, 0, 0, 0)), regen: true,
			want: schemas.Label{Plays: 12, UnhintedMean: 1.0 / 6, HintedMean: ptr(0.5), WinRate: 1.0 / 6, Regret: ptr(0.5 - 1.0/6),
				DesignerReward: ptr(0.5 - 1.0/6)},
		},
		{
			name: "invalid environment: reward -1, never learnable",
			cand: invalid, plays: nil, regen: true,
			want: schemas.Label{Valid: false, DesignerReward: ptr(-1)},
		},
		{
			name: "invalid environment with plays in the band is still not learnable",
			cand: invalid, plays: cat(arm(false, 1, 0), arm(true, 1, 1)), regen: true,
			want: schemas.Label{Valid: false, Plays: 4, UnhintedMean: 0.5, HintedMean: ptr(1), WinRate: 0.5, Regret: ptr(0.5), DesignerReward: ptr(-1)},
		},
		{
			name: "designer reward scaled by the reward range",
			cand: wide, plays: cat(arm(false, -5, -5, 5, -5), arm(true, 5, 5, 5, -5)), regen: true,
			want: schemas.Label{Plays: 8, UnhintedMean: -2.5, HintedMean: ptr(2.5), WinRate: 0.25, Regret: ptr(5),
				Learnable: true, Admitted: true, DesignerReward: ptr(0.5)},
		},
		{
			name: "designer reward clipped to 1",
			cand: validCand, plays: cat(arm(false, 0, 0, 1, 0), arm(true, 3, 3, 3, 3)), regen: true,
			want: schemas.Label{Plays: 8, UnhintedMean: 0.25, HintedMean: ptr(3), WinRate: 0.25, Regret: ptr(2.75),
				Learnable: true, Admitted: true, DesignerReward: ptr(1)},
		},
		{
			name: "designer reward clipped to -1",
			cand: validCand, plays: cat(arm(false, 2, 2, 0, 0), arm(true, 0, 0, 0, -1)), regen: true,
			want: schemas.Label{Plays: 8, UnhintedMean: 1, HintedMean: ptr(-0.25), WinRate: 0.5, Regret: ptr(-1.25),
				Learnable: true, Admitted: true, DesignerReward: ptr(-1)},
		},
		{
			name: "between regenerations: no hint arm, admitted stays, outside the band too",
			cand: validCand, plays: arm(false, 1, 1, 1, 1), regen: false,
			want: schemas.Label{Plays: 4, UnhintedMean: 1, WinRate: 1, Learnable: false, Admitted: true},
		},
		{
			name: "between regenerations inside the band",
			cand: validCand, plays: arm(false, 1, 0, 1, 0), regen: false,
			want: schemas.Label{Plays: 4, UnhintedMean: 0.5, WinRate: 0.5, Learnable: true, Admitted: true},
		},
		{
			name: "valid but never played: not learnable, no designer reward (unmeasured)",
			cand: validCand, plays: nil, regen: true,
			want: schemas.Label{DesignerReward: nil},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Compute(tc.cand, tc.plays, 0.2, 0.8, tc.regen)
			want := tc.want
			want.EnvID, want.SlotID, want.Skill = tc.cand.EnvID, tc.cand.SlotID, tc.cand.Skill
			if tc.cand.Valid {
				want.Valid = true
			}
			requireLabel(t, want, got)
		})
	}
}

// requireLabel compares labels with a tolerance on the float fields.
func requireLabel(t *testing.T, want, got schemas.Label) {
	t.Helper()
	near := func(name string, w, g *float64) {
		t.Helper()
		if w == nil || g == nil {
			require.Equal(t, w == nil, g == nil, "%s: want %v, got %v", name, deref(w), deref(g))
			return
		}
		require.InDelta(t, *w, *g, 1e-12, name)
	}
	near("unhinted_mean", &want.UnhintedMean, &got.UnhintedMean)
	near("win_rate", &want.WinRate, &got.WinRate)
	near("hinted_mean", want.HintedMean, got.HintedMean)
	near("regret", want.Regret, got.Regret)
	near("designer_reward", want.DesignerReward, got.DesignerReward)
	want.UnhintedMean, want.WinRate, want.HintedMean, want.Regret, want.DesignerReward = 0, 0, nil, nil, nil
	got.UnhintedMean, got.WinRate, got.HintedMean, got.Regret, got.DesignerReward = 0, 0, nil, nil, nil
	require.Equal(t, want, got)
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestFailuresDoNotBiasRegret builds an environment where the hint makes
// no difference to the agent and the sandbox fails the same share of plays
// in both arms. Counting failures the same way in both arms gives regret
// 0; the public code's scoring (failed hinted play 0, failed unhinted play
// -1) would invent positive regret from the failures alone.
func TestFailuresDoNotBiasRegret(t *testing.T) {
	outcomes := []float64{1, 0, 1, 0, 1, 0}
	var plays []schemas.Rollout
	for _, hinted := range []bool{false, true} {
		plays = append(plays, arm(hinted, outcomes...)...)
		// Two failed plays per arm: one crashed before any step, one after a
		// partial reward.
		plays = append(plays, play(hinted, 0, false, "env load: worker died"), play(hinted, 0.5, false, "env step: timeout"))
	}
	l := Compute(validCand, plays, 0.2, 0.8, true)
	require.EqualValues(t, 16, l.Plays)
	require.EqualValues(t, 4, l.Errors)
	require.NotNil(t, l.Regret)
	require.InDelta(t, 0, *l.Regret, 1e-12, "failures in both arms must not create regret")
	require.InDelta(t, 3.0/8, l.WinRate, 1e-12, "failed plays are losses")
	require.InDelta(t, 3.5/8, l.UnhintedMean, 1e-12, "failed plays count with their return so far")

	// The biased scoring, for contrast: what the public code would report.
	var sumU, sumH float64
	for _, p := range plays {
		r := p.Return
		if p.Error != "" {
			r = 0
			if !p.Hinted {
				r = -1
			}
		}
		if p.Hinted {
			sumH += r
		} else {
			sumU += r
		}
	}
	require.Greater(t, (sumH-sumU)/8, 0.2, "the contrast case must show the bias it guards against")

	// Failures only in the unhinted arm do lower its mean (they are real
	// losses), by exactly their share, no more.
	onlyU := append(arm(false, outcomes...), play(false, 0, false, "agent: refused"))
	onlyU = append(onlyU, arm(true, append(outcomes, 0)...)...)
	l = Compute(validCand, onlyU, 0.2, 0.8, true)
	require.InDelta(t, 0, *l.Regret, 1e-12, "a failed play scores like a lost play with the same return")
}

func TestDesignerReward(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lo, hi float64
		valid  bool
		regret *float64
		want   float64
	}{
		{"invalid", 0, 1, false, ptr(0.5), -1},
		{"invalid without hinted plays", 0, 1, false, nil, -1},
		{"unit range", 0, 1, true, ptr(0.3), 0.3},
		{"range width 10", -5, 5, true, ptr(2), 0.2},
		{"range width 0.5 clips", 0, 0.5, true, ptr(0.75), 1},
		{"negative clips", 0, 1, true, ptr(-3), -1},
		{"empty range falls back to width 1", 1, 1, true, ptr(0.25), 0.25},
		{"inverted range falls back to width 1", 1, 0, true, ptr(-0.25), -0.25},
		{"infinite range falls back to width 1", math.Inf(-1), math.Inf(1), true, ptr(0.5), 0.5},
		{"NaN range falls back to width 1", math.NaN(), 1, true, ptr(0.5), 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Candidate{Valid: tc.valid, RewardLow: tc.lo, RewardHigh: tc.hi}
			got, ok := DesignerReward(c, schemas.Label{Regret: tc.regret})
			require.True(t, ok)
			require.InDelta(t, tc.want, got, 1e-12)
			require.True(t, got >= -1 && got <= 1)
		})
	}
}

// TestLearnableMatchesMetric: the label's band test is the
// learnable_fraction metric's (metrics.InBand), so the metric equals the
// share of learnable labels even for bounds a hair off a win rate: a band
// from 0.3333333334 admits the win rate 1/3 in both.
func TestLearnableMatchesMetric(t *testing.T) {
	plays := arm(false, 1, 0, 0)
	for _, band := range [][2]float64{{0.3333333334, 0.8}, {0.2, 0.3333333332}, {1.0 / 3, 1.0 / 3}} {
		l := Compute(validCand, plays, band[0], band[1], false)
		frac, err := metrics.LearnableFraction([]float64{l.WinRate}, band[0], band[1])
		require.NoError(t, err)
		require.True(t, l.Learnable, "band %v, win rate %v", band, l.WinRate)
		require.Equal(t, 1.0, frac)
	}
	l := Compute(validCand, plays, 0.34, 0.8, false)
	require.False(t, l.Learnable, "1/3 is outside [0.34, 0.8]")
}

// TestNoHintNoDesignerReward: a valid environment whose hint call failed
// (or answered nothing) has no hinted plays and so no regret. It used to
// get the invalid environment's -1, so a failed model call punished the
// designer for an environment nobody measured; it now gets no reward
// (NULL), and the grpo stage makes no sample of its design.
func TestNoHintNoDesignerReward(t *testing.T) {
	_, ok := DesignerReward(validCand, schemas.Label{})
	require.False(t, ok)
	l := Compute(validCand, arm(false, 1, 0, 0, 1), 0.2, 0.8, true)
	require.Nil(t, l.Regret)
	require.Nil(t, l.DesignerReward)
	require.True(t, l.Learnable, "admission still follows the win rate")
}

// TestComputeForBlend labels one environment end to end: 4 unhinted plays,
// 2 won (win rate 0.5, mean return 0.5), 4 hinted with mean 0.75 (regret
// 0.25 -> scaled 1.67, clipped to 1): 0.6 + 0.4 = 1.
func TestComputeForBlend(t *testing.T) {
	cfg := config.Default().Label
	cfg.DesignerReward = config.DesignerRewardBlend
	plays := cat(arm(false, 1, 1, 0, 0), arm(true, 1, 1, 1, 0))
	l := ComputeFor(cfg, validCand, plays, true)
	require.NotNil(t, l.DesignerReward)
	require.InDelta(t, 1.0, *l.DesignerReward, 1e-12)
	require.InDelta(t, 0.25, *l.Regret, 1e-12)
	l = ComputeFor(cfg, validCand, plays, false)
	require.Nil(t, l.DesignerReward, "no designer reward between regenerations")
}

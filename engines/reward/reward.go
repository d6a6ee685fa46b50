// Package reward holds the designer reward formulas (docs/regret.md
// "Designer reward") and the skills' learning-potential baselines that
// the label stage writes and the grpo stage reads again for delayed
// designs.
package reward

import (
	"context"
	"math"
	"sort"

	"github.com/spade-pipeline/spade/pipeline"

	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// RewardInput is what a designer reward formula reads of one environment
// (docs/regret.md "Designer reward").
type RewardInput struct {
	// Valid is true when the environment passed validation; an invalid
	// one earns -1 under every formula.
	Valid bool
	// Regret is the mean return with the hint minus the mean without it,
	// in the environment's return units; nil when it has no hinted plays.
	Regret *float64
	// Width is the width of the declared reward range; a width that is
	// not a finite positive number counts as 1.
	Width float64
	// WinRate is the share of unhinted plays won, in [0, 1].
	WinRate float64
	// Unhinted is the number of unhinted plays behind WinRate; 0 leaves
	// the win rate unmeasured.
	Unhinted int
	// Baseline is the skill's learning-potential baseline (the slow
	// moving average of its win rate, Baselines); used by
	// learning_potential only.
	Baseline float64
}

// Plateau is the public code's flat-top difficulty reward of a win rate
// (spade/core/utils/rewards.py plateau_reward): 1 on [lo, hi], falling
// linearly to 0 over ramp on either side, 0 beyond. ramp must be > 0
// (config.Validate checks it).
func Plateau(winRate, lo, hi, ramp float64) float64 {
	switch {
	case winRate < lo:
		return math.Max(0, 1-(lo-winRate)/ramp)
	case winRate > hi:
		return math.Max(0, 1-(winRate-hi)/ramp)
	}
	return 1
}

// normRegret is regret divided by the reward width (1 when the width is
// not a finite positive number).
func normRegret(regret, width float64) float64 {
	if !(width > 0) || math.IsInf(width, 0) {
		width = 1
	}
	return regret / width
}

// DesignerRewardOf computes the designer reward of one environment under
// l.DesignerReward (docs/regret.md gives each formula and its source):
//
//	regret             clip(regret / width, -1, 1)
//	blend              w_p x Plateau(win rate) + w_r x clip(regret / width / scale, 0, 1)
//	solve_rate         Plateau(win rate)
//	learning_potential |win rate - baseline(skill)|
//
// An invalid environment earns -1 whatever the formula. ok is false when
// the reward is unmeasured (regret and blend without hinted plays; solve
// rate and learning potential without unhinted plays) or masked (a blend
// below 0, possible only without label.blend.regret_floor): the design is
// then not a training sample. A kind other than the four is read as
// regret (config.Validate refuses it earlier).
func DesignerRewardOf(l config.Label, in RewardInput) (reward float64, ok bool) {
	if !in.Valid {
		return -1, true
	}
	b := l.Blend
	switch l.DesignerRewardKind() {
	case config.DesignerRewardBlend:
		if in.Regret == nil || in.Unhinted == 0 {
			return 0, false
		}
		r := normRegret(*in.Regret, in.Width) / b.RegretScale
		if b.RegretFloor {
			r = math.Max(0, math.Min(1, r))
		}
		v := b.PlateauWeight*Plateau(in.WinRate, b.PlateauLow, b.PlateauHigh, b.PlateauRamp) + b.RegretWeight*r
		if v < 0 {
			// The public code masks negative blends from the designer
			// update: kept, they would pull the skill mean down and give
			// unsolvable environments a positive advantage after centring.
			return 0, false
		}
		return v, true
	case config.DesignerRewardSolveRate:
		if in.Unhinted == 0 {
			return 0, false
		}
		return Plateau(in.WinRate, b.PlateauLow, b.PlateauHigh, b.PlateauRamp), true
	case config.DesignerRewardLearningPotential:
		if in.Unhinted == 0 {
			return 0, false
		}
		return math.Abs(in.WinRate - in.Baseline), true
	}
	if in.Regret == nil {
		return 0, false
	}
	return math.Max(-1, math.Min(1, normRegret(*in.Regret, in.Width))), true
}

// EMA is one skill's pair of moving averages of its per-round mean win
// rate (public code: spade/core/learning_potential.py LearningPotential).
type EMA struct {
	// Fast and Slow are the averages; both equal the first value seen.
	Fast, Slow float64
	// Rounds counts the rounds folded in; 0 means no value yet (baseline
	// 0, as the public code's get_baseline without data).
	Rounds int
}

// Update folds in one round's mean win rate x: the first value sets both
// averages; later ones mu <- (1 - gamma) mu + gamma x, the public code's
// convention (a rate weights the new value).
func (e EMA) Update(x float64, lp config.LearningPotential) EMA {
	if e.Rounds == 0 {
		return EMA{Fast: x, Slow: x, Rounds: 1}
	}
	return EMA{Fast: (1-lp.GammaFast)*e.Fast + lp.GammaFast*x, Slow: (1-lp.GammaSlow)*e.Slow + lp.GammaSlow*x, Rounds: e.Rounds + 1}
}

// Baseline is the learning-potential baseline: the slow average, 0
// before any round.
func (e EMA) Baseline() float64 { return e.Slow }

// Baselines folds the labels of earlier rounds, in round order, into one
// EMA per skill: each round contributes, for each skill it has, the mean
// win rate of its labels that are valid and were played (Plays > 0). A
// skill absent from a round keeps its averages (skills rotate through
// the curriculum). The public code updates per rollout step from the
// actors' rewards, which is one update per round here.
func Baselines(rounds [][]schemas.Label, lp config.LearningPotential) map[string]EMA {
	out := map[string]EMA{}
	for _, labels := range rounds {
		sum := map[string]float64{}
		n := map[string]int{}
		for _, l := range labels {
			if !l.Valid || l.Plays == 0 {
				continue
			}
			sum[l.Skill] += l.WinRate
			n[l.Skill]++
		}
		skills := make([]string, 0, len(n))
		for s := range n {
			skills = append(skills, s)
		}
		sort.Strings(skills)
		for _, s := range skills {
			out[s] = out[s].Update(sum[s]/float64(n[s]), lp)
		}
	}
	return out
}

// HistoryInputs are the labels of rounds from..to-1, the inputs that
// ReadBaselines reads.
func HistoryInputs(from, to int) []pipeline.Input {
	var ins []pipeline.Input
	for r := max(1, from); r < to; r++ {
		ins = append(ins, pipeline.Input{Table: "labels", Round: r})
	}
	return ins
}

// ReadBaselines reads the labels of rounds from..to-1 and folds them into
// the skills' learning-potential averages (Baselines, with the run's
// label.learning_potential rates). Errors are pipeline.ReadAll's,
// returned unwrapped.
func ReadBaselines(ctx context.Context, env *pipeline.Env, from, to int) (map[string]EMA, error) {
	var rounds [][]schemas.Label
	for r := max(1, from); r < to; r++ {
		ls, err := pipeline.ReadAll(ctx, env, schemas.Labels, "labels", r)
		if err != nil {
			return nil, err
		}
		rounds = append(rounds, ls)
	}
	return Baselines(rounds, env.Config.Label.LearningPotential), nil
}

package config

import "fmt"

// Label configures regret labelling.
type Label struct {
	// BandLow is the lower end of the learnable band of win rates,
	// inclusive (docs/method.md step 6: [0.2, 0.8]); 0 <= BandLow <= BandHigh <= 1.
	BandLow float64 `yaml:"band_low" json:"band_low"`
	// BandHigh is the upper end of the learnable band, inclusive (default
	// 0.8).
	BandHigh float64 `yaml:"band_high" json:"band_high"`
	// DesignerReward is the designer reward formula (docs/regret.md):
	// "regret" (default: clip(regret / reward width, -1, 1)), "blend"
	// (the public recipes' REWARD_VARIANT=blend), "learning_potential"
	// or "solve_rate" (the public code's reward ablations). Pinned as ""
	// when "regret", so runs pinned before the setting keep their digest.
	DesignerReward string `yaml:"designer_reward" json:"designer_reward,omitempty"`
	// Blend holds the parameters of the blend and solve_rate rewards.
	Blend Blend `yaml:"blend" json:"blend,omitzero"`
	// LearningPotential holds the EMA rates of the learning_potential
	// reward.
	LearningPotential LearningPotential `yaml:"learning_potential" json:"learning_potential,omitzero"`
}

// Blend parameterises the blend designer reward (public code:
// spade/core/utils/delayed_env_rewards.py recompute_delayed_env_rewards_blend,
// with the recipes' flags of cmd/games/train_spade_*.sh):
//
//	blend = PlateauWeight x plateau(win rate) + RegretWeight x R
//	R     = clip(regret / width / RegretScale, 0, 1)   (RegretFloor)
//	      = regret / width / RegretScale               (otherwise)
//
// plateau is 1 on [PlateauLow, PlateauHigh] and falls linearly to 0 over
// PlateauRamp on either side. solve_rate is plateau(win rate) alone.
type Blend struct {
	// PlateauWeight weights the plateau of the win rate (public: 0.6);
	// >= 0.
	PlateauWeight float64 `yaml:"plateau_weight" json:"plateau_weight"`
	// RegretWeight weights the scaled regret (public: 0.4); >= 0.
	RegretWeight float64 `yaml:"regret_weight" json:"regret_weight"`
	// RegretScale divides the width-normalised regret (public
	// --spade-regret-scale 0.15); > 0.
	RegretScale float64 `yaml:"regret_scale" json:"regret_scale"`
	// RegretFloor clips the scaled regret to [0, 1] (public
	// --spade-regret-floor, set in every recipe). Without it a negative
	// regret can make the blend negative, and a negative blend is masked:
	// the design is not a training sample.
	RegretFloor bool `yaml:"regret_floor" json:"regret_floor"`
	// PlateauLow and PlateauHigh bound the plateau's top, in win rate
	// (public 0.4 and 0.6); 0 <= low <= high <= 1.
	PlateauLow float64 `yaml:"plateau_low" json:"plateau_low"`
	// PlateauHigh is the top's upper end (public 0.6).
	PlateauHigh float64 `yaml:"plateau_high" json:"plateau_high"`
	// PlateauRamp is the width in win rate over which the plateau falls
	// from 1 to 0 outside its top (public 0.25); > 0.
	PlateauRamp float64 `yaml:"plateau_ramp" json:"plateau_ramp"`
}

// DefaultBlend is the public recipes' blend (cmd/games/train_spade_30b.sh,
// REWARD_VARIANT=blend).
func DefaultBlend() Blend {
	return Blend{PlateauWeight: 0.6, RegretWeight: 0.4, RegretScale: 0.15, RegretFloor: true, PlateauLow: 0.4, PlateauHigh: 0.6, PlateauRamp: 0.25}
}

// LearningPotential parameterises the learning_potential designer reward
// |win rate - baseline(skill)|, the baseline being the slow one of two
// exponential moving averages of the skill's per-round mean win rate
// (public code: spade/core/learning_potential.py, where a rate weights the
// new value: mu <- (1 - gamma) mu + gamma x).
type LearningPotential struct {
	// GammaFast is the fast average's rate (public recipes --spade-gamma1
	// 0.98); in (0, 1], > GammaSlow. Only the slow average enters the
	// reward; the fast one is kept for the potential metric.
	GammaFast float64 `yaml:"gamma_fast" json:"gamma_fast"`
	// GammaSlow is the slow average's rate (public recipes --spade-gamma2
	// 0.85); in (0, 1).
	GammaSlow float64 `yaml:"gamma_slow" json:"gamma_slow"`
}

// DefaultLearningPotential is the public recipes' rates.
func DefaultLearningPotential() LearningPotential {
	return LearningPotential{GammaFast: 0.98, GammaSlow: 0.85}
}

// The designer reward formulas of label.designer_reward.
const (
	DesignerRewardRegret            = "regret"
	DesignerRewardBlend             = "blend"
	DesignerRewardLearningPotential = "learning_potential"
	DesignerRewardSolveRate         = "solve_rate"
)

// DesignerRewards lists the values of label.designer_reward, the default
// first.
var DesignerRewards = []string{DesignerRewardRegret, DesignerRewardBlend, DesignerRewardLearningPotential, DesignerRewardSolveRate}

// DefaultLabel is label.*'s default: the band [0.2, 0.8] (docs/method.md), the
// regret reward, and the public recipes' blend and learning-potential
// parameters.
func DefaultLabel() Label {
	return Label{BandLow: 0.2, BandHigh: 0.8, DesignerReward: DesignerRewardRegret, Blend: DefaultBlend(), LearningPotential: DefaultLearningPotential()}
}

// Check checks label.*: finite numbers, the reward formula and its
// parameters, and the band.
func (l Label) Check() []Problem {
	var p problems
	p.finite("label", l)
	p.atLeast("label.blend.plateau_weight", l.Blend.PlateauWeight, 0, false)
	p.atLeast("label.blend.regret_weight", l.Blend.RegretWeight, 0, false)
	p.atLeast("label.blend.regret_scale", l.Blend.RegretScale, 0, true)
	p.atLeast("label.blend.plateau_ramp", l.Blend.PlateauRamp, 0, true)
	p.oneOf("label.designer_reward", l.DesignerReward, DesignerRewards)
	if b := l.Blend; isFinite(b.PlateauLow) && isFinite(b.PlateauHigh) && !(b.PlateauLow >= 0 && b.PlateauLow <= b.PlateauHigh && b.PlateauHigh <= 1) {
		p.add(fmt.Sprintf("label.blend.plateau_low and label.blend.plateau_high must satisfy 0 <= plateau_low <= plateau_high <= 1 (got plateau_low %g, plateau_high %g)", b.PlateauLow, b.PlateauHigh), "label.blend.plateau_low", "label.blend.plateau_high")
	}
	if lp := l.LearningPotential; isFinite(lp.GammaFast) && isFinite(lp.GammaSlow) && !(lp.GammaSlow > 0 && lp.GammaSlow < lp.GammaFast && lp.GammaFast <= 1) {
		p.add(fmt.Sprintf("label.learning_potential.gamma_fast and label.learning_potential.gamma_slow must satisfy 0 < gamma_slow < gamma_fast <= 1 (got gamma_fast %g, gamma_slow %g)", lp.GammaFast, lp.GammaSlow), "label.learning_potential.gamma_fast", "label.learning_potential.gamma_slow")
	}
	if !(l.BandLow >= 0 && l.BandLow <= l.BandHigh && l.BandHigh <= 1) {
		p.add(fmt.Sprintf("label band must satisfy 0 <= band_low <= band_high <= 1 (got %g, %g)", l.BandLow, l.BandHigh), "label.band_low", "label.band_high")
	}
	return p
}

// DesignerRewardKind returns label.designer_reward with "" (a run pinned
// before the setting existed) read as "regret".
func (l Label) DesignerRewardKind() string {
	if l.DesignerReward == "" {
		return DesignerRewardRegret
	}
	return l.DesignerReward
}

// Memory configures environment memory (docs/method.md step 7).
type Memory struct {
	// Capacity is the most entries the memory holds (default 200, as in
	// the paper; > 0); the oldest are evicted first (FIFO).
	Capacity int `yaml:"capacity" json:"capacity"`
}

// DefaultMemory is memory.*'s default: 200 entries, as in the paper.
func DefaultMemory() Memory { return Memory{Capacity: 200} }

// Check checks memory.*: the capacity is a count.
func (m Memory) Check() []Problem {
	var p problems
	p.count("memory.capacity", m.Capacity)
	return p
}

// pin implements pinner: label.designer_reward, label.blend and
// label.learning_potential are pinned blank while at their defaults, so
// runs pinned before they existed keep their digest.
func (l Label) pin() any {
	if l.DesignerReward == DesignerRewardRegret {
		l.DesignerReward = ""
	}
	if l.Blend == DefaultBlend() {
		l.Blend = Blend{}
	}
	if l.LearningPotential == DefaultLearningPotential() {
		l.LearningPotential = LearningPotential{}
	}
	return l
}

// unpin implements unpinner: each blank one of them is its default.
func (l Label) unpin() any {
	d := DefaultLabel()
	if l.DesignerReward == "" {
		l.DesignerReward = d.DesignerReward
	}
	if l.Blend == (Blend{}) {
		l.Blend = d.Blend
	}
	if l.LearningPotential == (LearningPotential{}) {
		l.LearningPotential = d.LearningPotential
	}
	return l
}

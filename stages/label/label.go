// Package label is the label stage (docs/method.md step 6): per environment, the
// mean return with and without the hint, the win rate, hint-based regret,
// the learnable band, admission, and the designer reward (docs/regret.md).
package label

import (
	"context"
	"sort"

	"github.com/spade-pipeline/spade/engines/reward"

	"github.com/spade-pipeline/spade/engines/draw"
	"github.com/spade-pipeline/spade/engines/metrics"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// Stage is the label stage; it runs every round.
type Stage struct{}

// Name implements pipeline.Stage.
func (Stage) Name() string { return "label" }

// Outputs implements pipeline.Stage.
func (Stage) Outputs() []pipeline.Output { return []pipeline.Output{{Table: "labels"}} }

// Plan implements pipeline.Stage: on a regeneration round the candidates
// come from environments(r); otherwise from the pool carried from r-1.
// With label.designer_reward learning_potential a regeneration round also
// reads the labels of every earlier round (reward.HistoryInputs), the skills'
// baselines.
func (Stage) Plan(ri pipeline.RoundInfo, c *config.Config) ([]pipeline.Input, bool) {
	if ri.Round < 1 {
		return nil, false
	}
	ins := []pipeline.Input{{Table: "rollouts", Round: ri.Round}}
	if ri.Regeneration {
		ins = append(ins, pipeline.Input{Table: "environments", Round: ri.Round})
		if c != nil && c.Label.DesignerRewardKind() == config.DesignerRewardLearningPotential {
			ins = append(ins, reward.HistoryInputs(1, ri.Round)...)
		}
	} else {
		ins = append(ins, pipeline.Input{Table: "pool", Round: ri.Round - 1})
	}
	return ins, true
}

// ConfigSubset implements pipeline.Stage: the label settings, and under
// design.mode fixed_pool the round's draw from the pool (draw.PoolSize)
// with them.
func (Stage) ConfigSubset(c *config.Config) any {
	if n := draw.PoolSize(c.Design, c.Sample); n > 0 {
		return struct {
			Label config.Label
			Draw  int
		}{c.Label, n}
	}
	return c.Label
}

// Parts implements pipeline.Stage.Parts: the stage is one part, and its
// error is always nil.
func (Stage) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }

// Candidate is what labelling needs to know of an environment besides its
// plays.
type Candidate struct {
	// EnvID, SlotID and Skill identify the environment; they are copied
	// into the label.
	EnvID, SlotID, Skill string
	// Valid is true when the environment passed validation (always for
	// pool environments); an invalid one is never learnable and earns
	// designer reward -1.
	Valid bool
	// RewardLow is the lower bound of the declared reward range
	// (environments.reward_low; 0 for pool environments).
	RewardLow float64
	// RewardHigh is the upper bound (environments.reward_high; 1 for pool
	// environments). The width scales the designer reward; a width that is
	// not positive and finite counts as 1.
	RewardHigh float64
	// Baseline is the skill's learning-potential baseline (Baselines over
	// the earlier rounds); read by the learning_potential reward only.
	Baseline float64
}

// Compute labels one environment from its plays. Failed plays (Error set)
// count as plays with their recorded return (0 when the play never
// started) and as losses, the same way in both arms, so failures cannot
// bias regret (unlike the public code, which scores a failed hinted play 0
// and a failed unhinted one -1). lo and hi bound the learnable band,
// inclusive. regen says whether the round has hinted plays and a designer
// reward.
func Compute(c Candidate, plays []schemas.Rollout, lo, hi float64, regen bool) schemas.Label {
	return ComputeFor(config.Label{BandLow: lo, BandHigh: hi, DesignerReward: config.DesignerRewardRegret}, c, plays, regen)
}

// ComputeFor is Compute with the band and the designer reward formula of
// cfg (label.designer_reward, reward.DesignerRewardOf).
func ComputeFor(cfg config.Label, c Candidate, plays []schemas.Rollout, regen bool) schemas.Label {
	lo, hi := cfg.BandLow, cfg.BandHigh
	l := schemas.Label{EnvID: c.EnvID, SlotID: c.SlotID, Skill: c.Skill, Valid: c.Valid}
	var nU, nH, winsU int
	var sumU, sumH float64
	for _, p := range plays {
		l.Plays++
		if p.Error != "" {
			l.Errors++
		}
		if p.Hinted {
			nH++
			sumH += p.Return
			continue
		}
		nU++
		sumU += p.Return
		if p.Success && p.Error == "" {
			winsU++
		}
	}
	if nU > 0 {
		l.UnhintedMean = sumU / float64(nU)
		l.WinRate = float64(winsU) / float64(nU)
	}
	if regen && nH > 0 {
		h := sumH / float64(nH)
		reg := h - l.UnhintedMean
		l.HintedMean, l.Regret = &h, &reg
	}
	// The same band test as the learnable_fraction metric (inclusive, with
	// its 1e-9 tolerance), so the metric is exactly the share of learnable
	// labels whatever the configured bounds.
	l.Learnable = c.Valid && nU > 0 && metrics.InBand(l.WinRate, lo, hi)
	// Admission is decided at regeneration (the band is enforced as a
	// filter, not just logged); between regenerations every pool
	// environment stays admitted.
	l.Admitted = l.Learnable
	if !regen {
		l.Admitted = c.Valid
	}
	if !regen {
		return l
	}
	if r, ok := reward.DesignerRewardOf(cfg, reward.RewardInput{Valid: c.Valid, Regret: l.Regret, Width: c.RewardHigh - c.RewardLow, WinRate: l.WinRate, Unhinted: nU, Baseline: c.Baseline}); ok {
		l.DesignerReward = &r
	}
	return l
}

// DesignerReward shapes regret into [-1, 1] (docs/method.md step 8): -1 for an
// invalid environment; otherwise the regret divided by the width of the
// environment's declared reward range (so returns on any scale map to the
// same [-1, 1]) and clipped. Unsolvable and trivial environments have
// regret near 0 and so earn near 0, as in the paper. ok is false for a
// valid environment without regret (its hint call failed or answered
// nothing, so it has no hinted plays): its quality is unmeasured, and it
// gets no reward rather than the invalid environment's -1, which would
// punish the designer for a failed model call (docs/regret.md).
func DesignerReward(c Candidate, l schemas.Label) (r float64, ok bool) {
	return reward.DesignerRewardOf(config.Label{DesignerReward: config.DesignerRewardRegret}, reward.RewardInput{Valid: c.Valid, Regret: l.Regret, Width: c.RewardHigh - c.RewardLow})
}

// Run implements pipeline.Stage.Run: one labels row per candidate, in
// env_id order; plays of an env_id that is not a candidate are ignored.
// Its only errors are those of reading rollouts and the candidates'
// table (pipeline.ReadAll: the store's error, pipeline.ErrIntegrity,
// table.ErrCorrupt, a schema mismatch), returned unwrapped.
func (Stage) Run(ctx context.Context, env *pipeline.Env, _ int, out *pipeline.Out) error {
	ri := env.Round
	plays, err := pipeline.ReadAll(ctx, env, schemas.Rollouts, "rollouts", ri.Round)
	if err != nil {
		return err
	}
	byEnv := map[string][]schemas.Rollout{}
	for _, p := range plays {
		byEnv[p.EnvID] = append(byEnv[p.EnvID], p)
	}
	var cands []Candidate
	if ri.Regeneration {
		envs, err := pipeline.ReadAll(ctx, env, schemas.Environments, "environments", ri.Round)
		if err != nil {
			return err
		}
		for _, e := range envs {
			cands = append(cands, Candidate{EnvID: e.EnvID, SlotID: e.SlotID, Skill: e.Skill, Valid: e.Valid, RewardLow: e.RewardLow, RewardHigh: e.RewardHigh})
		}
	} else {
		pool, err := pipeline.ReadAll(ctx, env, schemas.Pool, "pool", ri.Round-1)
		if err != nil {
			return err
		}
		for _, p := range draw.Pool(pool, ri, draw.PoolSize(env.Config.Design, env.Config.Sample)) {
			cands = append(cands, Candidate{EnvID: p.EnvID, SlotID: p.SlotID, Skill: p.Skill, Valid: true, RewardLow: 0, RewardHigh: 1})
		}
	}
	sort.Slice(cands, func(a, b int) bool { return cands[a].EnvID < cands[b].EnvID })
	c := env.Config.Label
	if ri.Regeneration && c.DesignerRewardKind() == config.DesignerRewardLearningPotential {
		base, err := reward.ReadBaselines(ctx, env, 1, ri.Round)
		if err != nil {
			return err
		}
		for i := range cands {
			cands[i].Baseline = base[cands[i].Skill].Baseline()
		}
	}
	for _, cand := range cands {
		pipeline.Emit(out, schemas.Labels, "labels", ComputeFor(c, cand, byEnv[cand.EnvID], ri.Regeneration))
	}
	return nil
}

// Package grpo holds the SPADE training step (docs/method.md "Training", paper
// sec. 3): the GRPO advantage estimators for both roles, computed in Go so
// they are stored in the train_batch table and reproducible byte for byte,
// and the protocol that runs an external GRPO trainer process on that batch
// (see trainer.go). The pipeline stage that reads rollouts, labels and
// designs and writes train_batch lives in the lead's stage wrapper; this
// package provides pure functions and the trainer runner.
package grpo

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"

	"github.com/spade-pipeline/spade/pipeline/config"
)

// DefaultEps is the epsilon added to a group's standard deviation before
// dividing (advantage = (r - mean) / (std + eps)). 1e-6 keeps advantages of
// near-constant groups bounded without visibly shrinking ordinary ones
// (rewards are O(1)); it matches the common GRPO implementations' 1e-4..1e-6
// range. Zero-variance groups never reach the division (they get exactly 0).
const DefaultEps = 1e-6

// DefaultWeightCap caps the "ratio" designer weight, as the public SPADE
// code does (docs/method.md "Training": scale capped at 50).
const DefaultWeightCap = 50.0

// ErrNonFinite is returned (wrapped, naming the sample index) when a reward
// is NaN or ±Inf. The public code lets a NaN reward through its range check
// (docs/method.md "Known weaknesses"); here it stops the batch instead of silently
// poisoning a whole group's mean.
var ErrNonFinite = errors.New("non-finite reward")

// ErrShape is returned (wrapped) when parallel slices differ in length or an
// option is out of its domain.
var ErrShape = errors.New("invalid advantage input")

// GroupStats summarises one GroupAdvantages call for the train_metrics
// table. All counts are numbers of groups unless named Samples.
type GroupStats struct {
	// Samples is the number of rewards (len(rewards)).
	Samples int `json:"samples"`
	// Groups is the number of distinct group ids.
	Groups int `json:"groups"`
	// ZeroVariance counts groups of two or more samples whose rewards are
	// all exactly equal; their samples get advantage exactly 0 and carry no
	// policy-gradient signal (e.g. an environment every play won or lost).
	ZeroVariance int `json:"zero_variance"`
	// Singletons counts groups of exactly one sample: no baseline can be
	// formed from the sample itself, so its advantage is exactly 0.
	Singletons int `json:"singletons"`
	// ZeroAdvantageSamples counts samples in ZeroVariance or Singletons
	// groups (samples with advantage forced to 0).
	ZeroAdvantageSamples int `json:"zero_advantage_samples"`
	// MeanStd is the mean over informative groups (size >= 2, non-zero
	// variance) of the population standard deviation; 0 when there are none.
	MeanStd float64 `json:"mean_std"`
}

// GroupAdvantages computes GRPO's group-relative advantages (DeepSeekMath
// GRPO; SPADE paper sec. 3): for sample i in group g,
//
//	adv[i] = (rewards[i] - mean_g) / (std_g + eps)
//
// where std_g is the POPULATION standard deviation (divide by n, not n-1):
// the group is the whole set of samples being compared, not an estimate of a
// wider population, and with n-1 a group of two would be scaled by sqrt(2)
// more than a large group. (TRL's GRPOTrainer uses torch.std, i.e. n-1;
// the difference is a per-group constant factor sqrt((n-1)/n).)
//
// rewards and groups are parallel (one group id per sample, e.g. the env_id
// for agent plays); groups may have unequal sizes and need not be contiguous.
// Groups whose rewards are all exactly equal, and singleton groups, get
// advantage exactly 0 and are counted in stats. eps must be finite and >= 0
// (use DefaultEps). The output depends only on the inputs: group sums are
// accumulated in sample order, never in map order.
//
// Errors: ErrShape (length mismatch, bad eps), ErrNonFinite naming the first
// offending sample index.
func GroupAdvantages(rewards []float64, groups []string, eps float64) ([]float64, GroupStats, error) {
	if len(rewards) != len(groups) {
		return nil, GroupStats{}, fmt.Errorf("group advantages: %d rewards but %d group ids: %w", len(rewards), len(groups), ErrShape)
	}
	if math.IsNaN(eps) || math.IsInf(eps, 0) || eps < 0 {
		return nil, GroupStats{}, fmt.Errorf("group advantages: eps %v must be finite and >= 0: %w", eps, ErrShape)
	}
	if err := checkFinite(rewards); err != nil {
		return nil, GroupStats{}, fmt.Errorf("group advantages: %w", err)
	}
	members := groupMembers(groups)
	stats := GroupStats{Samples: len(rewards), Groups: len(members)}
	adv := make([]float64, len(rewards))
	var stdSum float64
	var informative int
	for _, m := range members {
		if len(m) == 1 {
			stats.Singletons++
			stats.ZeroAdvantageSamples++
			continue
		}
		if allEqual(rewards, m) {
			stats.ZeroVariance++
			stats.ZeroAdvantageSamples += len(m)
			continue
		}
		mean, std := meanStd(rewards, m)
		stdSum += std
		informative++
		for _, i := range m {
			adv[i] = (rewards[i] - mean) / (std + eps)
		}
	}
	if informative > 0 {
		stats.MeanStd = stdSum / float64(informative)
	}
	return adv, stats, nil
}

// groupMembers returns each group's member indices in sample order, groups
// in order of first appearance. The map is used only for lookup, so the
// output never depends on its iteration order.
func groupMembers(groups []string) [][]int {
	ord := make(map[string]int, len(groups))
	var members [][]int
	for i, g := range groups {
		o, ok := ord[g]
		if !ok {
			o = len(members)
			ord[g] = o
			members = append(members, nil)
		}
		members[o] = append(members[o], i)
	}
	return members
}

func checkFinite(rewards []float64) error {
	for i, r := range rewards {
		if math.IsNaN(r) || math.IsInf(r, 0) {
			return fmt.Errorf("sample %d: reward %v: %w", i, r, ErrNonFinite)
		}
	}
	return nil
}

func allEqual(x []float64, m []int) bool {
	for _, i := range m[1:] {
		if x[i] != x[m[0]] {
			return false
		}
	}
	return true
}

// meanStd returns the mean and population standard deviation of x over m,
// two-pass for accuracy.
func meanStd(x []float64, m []int) (float64, float64) {
	var s float64
	for _, i := range m {
		s += x[i]
	}
	mean := s / float64(len(m))
	var ss float64
	for _, i := range m {
		d := x[i] - mean
		ss += d * d
	}
	return mean, math.Sqrt(ss / float64(len(m)))
}

// DesignerNorm selects the role-level normalisation of designer advantages
// after per-skill centring.
type DesignerNorm string

const (
	// DesignerNormNone keeps (reward - skill mean) unscaled, as the public
	// SPADE code does; the designer weight then carries all the scaling.
	DesignerNormNone DesignerNorm = config.DesignerNormNone
	// DesignerNormStd divides the centred rewards by the designer role's
	// population std over the whole batch (+ eps), i.e. role-specific
	// advantage normalisation as the paper describes (sec. 5 "Stabilisers").
	DesignerNormStd DesignerNorm = config.DesignerNormStd
)

// WeightKind names a designer weight rule.
type WeightKind string

const (
	// WeightRatio is the public code's rule: weight = (agent samples /
	// designer samples) x regeneration interval, capped (default 50).
	WeightRatio WeightKind = config.WeightRuleRatio
	// WeightNone gives designer samples weight 1, like agent samples.
	WeightNone WeightKind = config.WeightRuleNone
	// WeightFixed gives every designer sample the configured constant.
	WeightFixed WeightKind = config.WeightRuleFixed
)

// WeightRule is a parsed designer weight rule: "ratio", "none" or
// "fixed:X" (X a finite number > 0). See docs/training.md.
type WeightRule struct {
	// Kind is WeightRatio, WeightNone or WeightFixed; "" acts as
	// WeightNone.
	Kind WeightKind
	// Fixed is the constant of a "fixed:X" rule; unused otherwise.
	Fixed float64
}

// String renders the rule in the form ParseWeightRule accepts.
func (w WeightRule) String() string {
	if w.Kind == WeightFixed {
		return "fixed:" + strconv.FormatFloat(w.Fixed, 'g', -1, 64)
	}
	return string(w.Kind)
}

// ParseWeightRule parses a designer weight rule from config text: "ratio",
// "none" or "fixed:X" (config.ParseWeightRule, which config.Validate
// also uses). Errors wrap ErrShape and quote the text.
func ParseWeightRule(s string) (WeightRule, error) {
	kind, fixed, err := config.ParseWeightRule(s)
	if err != nil {
		return WeightRule{}, fmt.Errorf("%w: %w", err, ErrShape)
	}
	return WeightRule{Kind: WeightKind(kind), Fixed: fixed}, nil
}

// DesignerOptions configures DesignerAdvantages.
type DesignerOptions struct {
	// Norm is the role-level normalisation; "" means DesignerNormNone.
	Norm DesignerNorm
	// Eps is added to the role std under DesignerNormStd; must be >= 0.
	Eps float64
	// Weight is the weight rule; the zero value means WeightNone.
	Weight WeightRule
	// AgentSamples is the number of agent samples (unhinted plays) in the
	// same training batch; used by WeightRatio.
	AgentSamples int
	// RegenerationInterval is k, the number of training rounds between
	// regenerations (docs/method.md step 8: 4 for games, 8 for tool use); designer
	// samples exist only on regeneration rounds, so WeightRatio scales them
	// by k to keep their share of the gradient over k rounds. Used by
	// WeightRatio; must be >= 1 there.
	RegenerationInterval int
	// WeightCap caps the WeightRatio weight; 0 means DefaultWeightCap.
	WeightCap float64
}

// SkillMean is one skill's designer reward mean: the baseline
// DesignerAdvantages subtracts from that skill's rewards. It is returned to
// callers in DesignerStats.Skills; the grpo stage does not store it
// (train_metrics has no skill column).
type SkillMean struct {
	// Skill is the skill (the designer samples' group).
	Skill string `json:"skill"`
	// Samples is the number of designer samples of the skill.
	Samples int `json:"samples"`
	// Mean is their mean designer reward, in [-1, 1].
	Mean float64 `json:"mean"`
}

// DesignerStats summarises a DesignerAdvantages call.
type DesignerStats struct {
	// Weight is the weight every designer sample gets (the trainer
	// multiplies each sample's per-token loss by it).
	Weight float64 `json:"weight"`
	// RoleStd is the population std of the skill-centred rewards over the
	// batch (reported whatever Norm is).
	RoleStd float64 `json:"role_std"`
	// Skills lists the per-skill reward means (the centring baselines),
	// sorted by skill name. The grpo stage does not store them.
	Skills []SkillMean `json:"skills"`
}

// DesignerAdvantages computes advantages for designer samples (one per
// generation response, rewarded by the label stage with the designer reward
// in [-1, 1]; docs/method.md "Training"):
//
//	centred[i] = rewards[i] - mean over samples of skill(i)   (reward centring)
//	adv[i]     = centred[i]                          with Norm "none" (public code)
//	adv[i]     = centred[i] / (std(centred) + Eps)   with Norm "std" (role-level)
//
// and one weight for all designer samples per opts.Weight: "none" = 1,
// "fixed:X" = X, "ratio" = min(AgentSamples / len(rewards) x
// RegenerationInterval, WeightCap). The public code multiplies the advantage
// by that scale; here it is kept separate as the batch's weight column so
// that train_batch shows both, and the trainer applies it to the loss
// (identical gradient). A skill with a single sample gets advantage 0.
//
// Errors: ErrShape (lengths, options, no samples with WeightRatio, role std
// zero under DesignerNormStd is not an error: advantages are then all 0),
// ErrNonFinite naming the sample index.
func DesignerAdvantages(rewards []float64, skills []string, opts DesignerOptions) ([]float64, DesignerStats, error) {
	if len(rewards) != len(skills) {
		return nil, DesignerStats{}, fmt.Errorf("designer advantages: %d rewards but %d skills: %w", len(rewards), len(skills), ErrShape)
	}
	if err := checkFinite(rewards); err != nil {
		return nil, DesignerStats{}, fmt.Errorf("designer advantages: %w", err)
	}
	if math.IsNaN(opts.Eps) || math.IsInf(opts.Eps, 0) || opts.Eps < 0 {
		return nil, DesignerStats{}, fmt.Errorf("designer advantages: eps %v must be finite and >= 0: %w", opts.Eps, ErrShape)
	}
	weight, err := designerWeight(len(rewards), opts)
	if err != nil {
		return nil, DesignerStats{}, fmt.Errorf("designer advantages: %w", err)
	}
	stats := DesignerStats{Weight: weight}
	members := groupMembers(skills)
	centred := make([]float64, len(rewards))
	for _, m := range members {
		mean, _ := meanStd(rewards, m)
		// A skill of one sample, or whose rewards are all equal, centres
		// to exactly 0 (as GroupAdvantages): the mean's rounding would
		// leave ~1e-17, which the std normalisation can blow up to O(1)
		// when eps is 0.
		if len(m) > 1 && !allEqual(rewards, m) {
			for _, i := range m {
				centred[i] = rewards[i] - mean
			}
		}
		stats.Skills = append(stats.Skills, SkillMean{Skill: skills[m[0]], Samples: len(m), Mean: mean})
	}
	sort.Slice(stats.Skills, func(a, b int) bool { return stats.Skills[a].Skill < stats.Skills[b].Skill })
	if len(rewards) > 0 {
		all := make([]int, len(rewards))
		for i := range all {
			all[i] = i
		}
		_, stats.RoleStd = meanStd(centred, all)
	}
	switch opts.Norm {
	case "", DesignerNormNone:
	case DesignerNormStd:
		if stats.RoleStd == 0 {
			for i := range centred {
				centred[i] = 0
			}
			break
		}
		for i := range centred {
			centred[i] /= stats.RoleStd + opts.Eps
		}
	default:
		return nil, DesignerStats{}, fmt.Errorf("designer advantages: norm %q: want \"none\" or \"std\": %w", opts.Norm, ErrShape)
	}
	return centred, stats, nil
}

func designerWeight(designer int, opts DesignerOptions) (float64, error) {
	switch opts.Weight.Kind {
	case "", WeightNone:
		return 1, nil
	case WeightFixed:
		if math.IsNaN(opts.Weight.Fixed) || math.IsInf(opts.Weight.Fixed, 0) || opts.Weight.Fixed <= 0 {
			return 0, fmt.Errorf("weight %s: constant must be finite and > 0: %w", opts.Weight, ErrShape)
		}
		return opts.Weight.Fixed, nil
	case WeightRatio:
		if opts.RegenerationInterval < 1 {
			return 0, fmt.Errorf("weight ratio: regeneration interval %d must be >= 1: %w", opts.RegenerationInterval, ErrShape)
		}
		if opts.AgentSamples < 0 {
			return 0, fmt.Errorf("weight ratio: agent samples %d must be >= 0: %w", opts.AgentSamples, ErrShape)
		}
		limit := opts.WeightCap
		if limit == 0 {
			limit = DefaultWeightCap
		}
		if math.IsNaN(limit) || limit <= 0 {
			return 0, fmt.Errorf("weight ratio: cap %v must be > 0: %w", limit, ErrShape)
		}
		if designer == 0 {
			// No designer samples: the weight is never applied; report the cap
			// rather than dividing by zero.
			return limit, nil
		}
		w := float64(opts.AgentSamples) / float64(designer) * float64(opts.RegenerationInterval)
		if w > limit {
			w = limit
		}
		if w == 0 {
			// No agent samples: nothing to balance against; weight 1.
			w = 1
		}
		return w, nil
	}
	return 0, fmt.Errorf("weight rule kind %q: want ratio, none or fixed: %w", opts.Weight.Kind, ErrShape)
}

package config

import "fmt"

// Sampling is one role's sampling settings, the temperature, top_p and
// max_tokens of design.*, hint.* and rollout.*.
type Sampling struct {
	// Temperature is the sampling temperature (>= 0).
	Temperature float64
	// TopP is the nucleus-sampling mass in (0, 1]; 0 sends none.
	TopP float64
	// MaxTokens bounds one completion, in tokens (> 0).
	MaxTokens int
}

// Sampling returns the designer's sampling settings.
func (d Design) Sampling() Sampling { return Sampling{d.Temperature, d.TopP, d.MaxTokens} }

// Sampling returns the hint writer's sampling settings.
func (h Hint) Sampling() Sampling { return Sampling{h.Temperature, h.TopP, h.MaxTokens} }

// Sampling returns the agent's sampling settings (per turn).
func (r Rollout) Sampling() Sampling { return Sampling{r.Temperature, r.TopP, r.MaxTokens} }

// Design configures generation (docs/method.md step 3).
type Design struct {
	// Mode says where a run's environments come from: "designer" (the
	// default: SPADE's self-play, the designer writes a fresh pool every
	// regenerate_every rounds) or "fixed_pool" (the fixed-environment
	// baselines of docs/method.md "Baselines and ablations": the pool that
	// `spade pool import` commits at round 0 is played and trained on
	// every round, no round regenerates, and the designer and the hint
	// writer are never called; docs/recipes.md "Fixed-pool baselines").
	// Pinned blank while "designer", so runs pinned before the setting
	// existed keep their digest.
	Mode string `yaml:"mode" json:"mode,omitempty"`
	// MaxAttempts bounds generation attempts per slot (paper: 5).
	MaxAttempts int `yaml:"max_attempts" json:"max_attempts"`
	// SlotsPerPart is the unit of sharded work.
	SlotsPerPart int `yaml:"slots_per_part" json:"slots_per_part"`
	// Temperature is the designer's sampling temperature (>= 0; default
	// 1.0; public code 0.6). MaxTokens bounds a designer answer (default
	// 4,096; public code 16,384).
	Temperature float64 `yaml:"temperature" json:"temperature"`
	// TopP is the nucleus-sampling mass, in (0, 1]; 0 (default) sends
	// none, so the server's default applies.
	TopP float64 `yaml:"top_p" json:"top_p,omitempty"`
	// MaxTokens bounds one completion, in tokens (> 0); an answer cut at
	// it (finish_reason "length") is not an answer (docs/models.md).
	MaxTokens int `yaml:"max_tokens" json:"max_tokens"`
}

// Hint configures the hint call (docs/method.md step 5).
type Hint struct {
	// Temperature is the hint writer's sampling temperature (>= 0;
	// default 1.0; public code 0.3). MaxTokens bounds a hint (default 512;
	// public code 4,096, 2,048 for tool use).
	Temperature float64 `yaml:"temperature" json:"temperature"`
	// TopP is the nucleus-sampling mass, in (0, 1]; 0 (default) sends
	// none, so the server's default applies.
	TopP float64 `yaml:"top_p" json:"top_p,omitempty"`
	// MaxTokens bounds one completion, in tokens (> 0); an answer cut at
	// it (finish_reason "length") is not an answer (docs/models.md).
	MaxTokens int `yaml:"max_tokens" json:"max_tokens"`
}

// Rollout configures plays (docs/method.md step 6).
type Rollout struct {
	// GroupSize is G: plays per arm (hinted / unhinted) per environment.
	GroupSize int `yaml:"group_size" json:"group_size"`
	// MaxTurns caps any environment's turn limit.
	MaxTurns int `yaml:"max_turns" json:"max_turns"`
	// EnvsPerPart is the unit of sharded work (bounds memory per part).
	EnvsPerPart int `yaml:"envs_per_part" json:"envs_per_part"`
	// Temperature is the agent's sampling temperature (>= 0; default
	// 1.0; public code 0.6). MaxTokens bounds one agent turn (default 512;
	// public code 8,192).
	Temperature float64 `yaml:"temperature" json:"temperature"`
	// TopP is the nucleus-sampling mass, in (0, 1]; 0 (default) sends
	// none, so the server's default applies.
	TopP float64 `yaml:"top_p" json:"top_p,omitempty"`
	// MaxTokens bounds one completion, in tokens (> 0); an answer cut at
	// it (finish_reason "length") is not an answer (docs/models.md).
	MaxTokens int `yaml:"max_tokens" json:"max_tokens"`
	// MaxContextTokens bounds one play, in tokens: when a turn's prompt
	// and completion together reach it, the play ends truncated (0, the
	// default, sets no bound; public code: 32,768).
	MaxContextTokens int `yaml:"max_context_tokens" json:"max_context_tokens"`
	// ActionFormat says how the action is read from the agent's reply and
	// what the agent's system prompt asks for: valid_actions (default),
	// boxed (the public code's \boxed{}), answer_tag (<answer>...</answer>)
	// or raw (the whole reply); docs/models.md.
	ActionFormat string `yaml:"action_format" json:"action_format"`
}

// The values of design.mode.
const (
	// DesignModeDesigner is SPADE's self-play: a designer writes the pool.
	DesignModeDesigner = "designer"
	// DesignModeFixedPool plays and trains on an imported pool only.
	DesignModeFixedPool = "fixed_pool"
)

// DesignModes lists the values of design.mode.
var DesignModes = []string{DesignModeDesigner, DesignModeFixedPool}

// The values of rollout.action_format (engines/action implements them).
const (
	// ActionFormatValidActions matches the reply against the
	// observation's "Valid actions:" line (the default).
	ActionFormatValidActions = "valid_actions"
	// ActionFormatBoxed takes the last balanced \boxed{...} of the reply.
	ActionFormatBoxed = "boxed"
	// ActionFormatAnswerTag takes the last <answer>...</answer> of the
	// reply.
	ActionFormatAnswerTag = "answer_tag"
	// ActionFormatRaw steps the reply, trimmed, as it is.
	ActionFormatRaw = "raw"
)

// ActionFormats lists the values of rollout.action_format, the default
// first. Callers must not modify it.
var ActionFormats = []string{ActionFormatValidActions, ActionFormatBoxed, ActionFormatAnswerTag, ActionFormatRaw}

// check checks one role's sampling settings; role is the section key
// (design, hint, rollout).
func (s Sampling) check(role string, p *problems) {
	p.count(role+".max_tokens", s.MaxTokens)
	if k := role + ".temperature"; isFinite(s.Temperature) && s.Temperature < 0 {
		p.add(fmt.Sprintf("%s must be >= 0 (got %g)", k, s.Temperature), k)
	}
	if k := role + ".top_p"; isFinite(s.TopP) && (s.TopP < 0 || s.TopP > 1) {
		p.add(fmt.Sprintf("%s must be in (0, 1], or 0 to send none (got %g)", k, s.TopP), k)
	}
}

// DefaultDesign is design.*'s default: SPADE's self-play designer, the
// paper's 5 attempts per slot, 8 slots per part, temperature 1 and 4,096
// tokens per answer.
func DefaultDesign() Design {
	return Design{Mode: DesignModeDesigner, MaxAttempts: 5, SlotsPerPart: 8, Temperature: 1.0, MaxTokens: 4096}
}

// Check checks design.*: finite numbers, counts, the designer's sampling
// and the mode.
func (d Design) Check() []Problem {
	var p problems
	p.finite("design", d)
	p.count("design.max_attempts", d.MaxAttempts)
	p.count("design.slots_per_part", d.SlotsPerPart)
	d.Sampling().check("design", &p)
	p.oneOf("design.mode", d.Mode, DesignModes)
	return p
}

// DefaultHint is hint.*'s default: temperature 1 and 512 tokens per
// hint.
func DefaultHint() Hint { return Hint{Temperature: 1.0, MaxTokens: 512} }

// Check checks hint.*: finite numbers and the hint writer's sampling.
func (h Hint) Check() []Problem {
	var p problems
	p.finite("hint", h)
	h.Sampling().check("hint", &p)
	return p
}

// DefaultRollout is rollout.*'s default: G = 8 plays per arm, at most 15
// turns, 8 environments per part, temperature 1, 512 tokens per turn, no
// context bound, the valid_actions format.
func DefaultRollout() Rollout {
	return Rollout{GroupSize: 8, MaxTurns: 15, EnvsPerPart: 8, Temperature: 1.0, MaxTokens: 512, ActionFormat: ActionFormatValidActions}
}

// Check checks rollout.*: finite numbers, counts, the agent's sampling
// and the action format.
func (r Rollout) Check() []Problem {
	var p problems
	p.finite("rollout", r)
	p.count("rollout.group_size", r.GroupSize)
	p.count("rollout.max_turns", r.MaxTurns)
	p.count("rollout.envs_per_part", r.EnvsPerPart)
	p.countOrZero("rollout.max_context_tokens", r.MaxContextTokens)
	r.Sampling().check("rollout", &p)
	p.oneOf("rollout.action_format", r.ActionFormat, ActionFormats)
	return p
}

// pin implements pinner: design.mode is pinned blank while "designer",
// so runs pinned before the setting existed keep their digest.
func (d Design) pin() any {
	if d.Mode == DesignModeDesigner {
		d.Mode = ""
	}
	return d
}

// unpin implements unpinner: a blank design.mode is "designer".
func (d Design) unpin() any {
	if d.Mode == "" {
		d.Mode = DefaultDesign().Mode
	}
	return d
}

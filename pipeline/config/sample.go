package config

import (
	"fmt"
	"strings"
)

// Sample configures corpus sampling and the skill curriculum (docs/method.md
// steps 1-2).
type Sample struct {
	// Slots is the number of environments per regeneration (paper: 24).
	Slots int `yaml:"slots" json:"slots"`
	// DocsPerSlot is the number of grounding documents per slot.
	DocsPerSlot int `yaml:"docs_per_slot" json:"docs_per_slot"`
	// Skills are the six skill categories; ActiveSkills of them are active
	// per regeneration, in round-robin.
	Skills []string `yaml:"skills" json:"skills"`
	// ActiveSkills is how many of Skills are active per regeneration
	// (default 3; 1..len(Skills)): regeneration g takes the ActiveSkills
	// consecutive skills from index g*ActiveSkills, wrapping around.
	ActiveSkills int `yaml:"active_skills" json:"active_skills"`
	// Setting is "game", "tool_use" or "mixed" (every ToolUseEvery-th slot
	// is tool use).
	Setting string `yaml:"setting" json:"setting"`
	// ToolUseEvery is the tool-use period of the "mixed" setting (default
	// 4, > 0): slot i is tool use when i % ToolUseEvery == ToolUseEvery-1.
	// Unused by the other settings.
	ToolUseEvery int `yaml:"tool_use_every" json:"tool_use_every"`
}

// The values of sample.setting.
const (
	// SettingGame makes every slot a multi-turn game.
	SettingGame = "game"
	// SettingToolUse makes every slot a tool-use task.
	SettingToolUse = "tool_use"
	// SettingMixed makes every sample.tool_use_every-th slot tool use,
	// the others games.
	SettingMixed = "mixed"
)

// Settings lists the values of sample.setting.
var Settings = []string{SettingGame, SettingToolUse, SettingMixed}

// DefaultSample is sample.*'s default: the paper's 24 slots of one
// document each, three of its six skills active per regeneration, the
// mixed setting with every fourth slot tool use.
func DefaultSample() Sample {
	return Sample{
		Slots: 24, DocsPerSlot: 1, ActiveSkills: 3, Setting: SettingMixed, ToolUseEvery: 4,
		Skills: []string{"logical_deduction", "spatial_reasoning", "causal_inference", "planning", "pattern_induction", "quantitative_reasoning"},
	}
}

// Check checks sample.*: counts, the active skills against the skills,
// named skills, and the setting.
func (s Sample) Check() []Problem {
	var p problems
	p.count("sample.slots", s.Slots)
	p.count("sample.docs_per_slot", s.DocsPerSlot)
	p.count("sample.active_skills", s.ActiveSkills)
	p.count("sample.tool_use_every", s.ToolUseEvery)
	if len(s.Skills) == 0 || s.ActiveSkills > len(s.Skills) {
		p.add(fmt.Sprintf("sample.active_skills (%d) must be between 1 and the number of sample.skills (%d)", s.ActiveSkills, len(s.Skills)), "sample.active_skills", "sample.skills")
	}
	for i, sk := range s.Skills {
		// An empty name reached every designer prompt of its slots as an
		// empty skill (model.backend openai takes any other name).
		if strings.TrimSpace(sk) == "" {
			p.add(fmt.Sprintf("sample.skills[%d] is empty: each skill needs a name", i), "sample.skills")
			break
		}
	}
	p.oneOf("sample.setting", s.Setting, Settings)
	return p
}

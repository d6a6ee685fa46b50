package config

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

package modeltest

import (
	"strings"

	"github.com/spade-pipeline/spade/engines/model"
)

// Roles the default handler recognises in a prompt (see Classify).
const (
	RoleDesign = "design"
	RoleHint   = "hint"
	RoleAgent  = "agent"
)

// DefaultEnvSource is a small valid environment written to the spade_env
// contract (engines/prompt): reach a shown target total by
// adding 1, 2 or 3 per turn; overshooting loses. It is what the default
// handler designs when no WithEnvSource is given.
const DefaultEnvSource = `from spade_env import Env


class ReachTarget(Env):
    """Reach the target total exactly by adding 1, 2 or 3 each turn."""

    name = "reach_target"
    skill = "planning"
    max_turns = 15
    reward_range = (0.0, 1.0)

    def reset(self, seed=None):
        super().reset(seed)
        self.target = self.rng.randint(12, 24)
        self.total = 0
        self.turn = 0
        return self._observation("Reach the target total exactly."), {}

    def _observation(self, prefix):
        return (
            f"{prefix} Total: {self.total}. Target: {self.target}. "
            f"Turns left: {self.max_turns - self.turn}.\n"
            "Valid actions: add 1 | add 2 | add 3"
        )

    def step(self, action):
        self.turn += 1
        choice = " ".join(str(action).strip().lower().split())
        if choice not in ("add 1", "add 2", "add 3"):
            if self.turn >= self.max_turns:
                return self._observation("Out of turns: you lose."), 0.0, False, True, {"success": False}
            return self._observation(f"Unknown action {choice!r}; choose one of the valid actions."), 0.0, False, False, {}
        self.total += int(choice.split()[1])
        if self.total == self.target:
            return self._observation("Exactly on target: you win."), 1.0, True, False, {"success": True}
        if self.total > self.target:
            return self._observation("Overshot the target: you lose."), 0.0, True, False, {"success": False}
        if self.turn >= self.max_turns:
            return self._observation("Out of turns: you lose."), 0.0, False, True, {"success": False}
        return self._observation("Keep going."), 0.0, False, False, {}
`

// DefaultHint is what the default handler answers to hint prompts.
const DefaultHint = "Count how far the total is from the target and never add more than that distance; add 3 while the gap exceeds 3, then close it exactly."

// Classify tells which SPADE call a request is, from its prompt text
// alone (Meta never reaches a server): RoleHint when a message asks for a
// privileged hint, RoleDesign when a message addresses the Environment
// Designer, RoleAgent otherwise. The phrases are the ones the templates in
// engines/prompt use; that package's tests check they still match.
func Classify(req model.Request) string {
	design := false
	for _, m := range req.Messages {
		if m.Role != model.RoleSystem && m.Role != model.RoleUser {
			continue
		}
		if strings.Contains(m.Content, "privileged hint") && strings.Contains(m.Content, "environment source") {
			return RoleHint
		}
		if strings.Contains(m.Content, "Environment Designer") {
			design = true
		}
	}
	if design {
		return RoleDesign
	}
	return RoleAgent
}

// DefaultHandler returns a Handler that answers plausibly for each role:
// a designer prompt gets envSource in one python code block; a hint prompt
// gets hint; an agent prompt with tools gets a call of one tool; any other
// agent prompt gets one of the actions listed on the last "Valid actions:"
// line of the conversation (chosen by a hash of the observations, seed and
// sample index, so answers are deterministic but varied), or "done".
// It answers N choices (N <= 0 means 1). It is BehavingHandler with the
// zero Behaviour.
func DefaultHandler(envSource, hint string) Handler {
	return BehavingHandler(envSource, hint, Behaviour{})
}

// lastValidActions parses the newest "Valid actions: a | b | c" line.
func lastValidActions(msgs []model.Message) []string {
	for i := len(msgs) - 1; i >= 0; i-- {
		lines := strings.Split(msgs[i].Content, "\n")
		for j := len(lines) - 1; j >= 0; j-- {
			rest, ok := strings.CutPrefix(strings.TrimSpace(lines[j]), "Valid actions:")
			if !ok {
				continue
			}
			var out []string
			for _, a := range strings.Split(rest, "|") {
				if a = strings.TrimSpace(a); a != "" {
					out = append(out, a)
				}
			}
			if len(out) > 0 {
				return out
			}
		}
	}
	return nil
}

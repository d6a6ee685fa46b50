package procedural

import "strings"

// GenericHint is the hint for a source this backend did not design: honest
// general advice, since nothing may be executed to find the solution.
const GenericHint = "Explore systematically: read the valid actions, never repeat an action that failed, " +
	"narrow the possibilities with every piece of feedback, and commit to an answer only once the evidence points to it."

// WriteHint returns a short hint for an environment source, computed from
// its SPADE_PROCEDURAL parameters without executing anything (docs/method.md
// step 5). The hint carries privileged knowledge that holds for every seed
// (a window that contains the hidden value, the rule's form, the opening of
// a plan) but never every action. Sources without a valid marker get
// GenericHint; WriteHint never fails.
func WriteHint(source string) string {
	m, err := parseMarker(source)
	if err != nil {
		return GenericHint
	}
	f, _ := familyByName(m.Family)
	h := safeHint(f, m.Params)
	if strings.TrimSpace(h) == "" {
		return GenericHint
	}
	return h
}

// safeHint runs a family's hint writer; a marker edited into an unexpected
// shape (the source is untrusted text) must not crash the stage, so a panic
// on missing parameters falls back to GenericHint.
func safeHint(f family, p Params) (h string) {
	defer func() {
		if recover() != nil {
			h = GenericHint
		}
	}()
	return f.hint(p)
}

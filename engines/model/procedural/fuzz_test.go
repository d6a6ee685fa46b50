package procedural

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/spade-pipeline/spade/engines/model"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// FuzzWriteHint: the hint writer reads untrusted environment source; it
// must never panic and always return a hint.
func FuzzWriteHint(f *testing.F) {
	f.Add(`SPADE_PROCEDURAL = {"family": "fog_maze", "difficulty": 2, "version": 1, "params": {"plan": ["east", "north"]}}`)
	f.Add(`SPADE_PROCEDURAL = {"family": "grid_scan", "difficulty": 2, "version": 1, "params": {"zone": [1]}}`)
	f.Add(`SPADE_PROCEDURAL = {"family": "budget_allocation", "difficulty": 9, "version": 1, "params": {"best": []}}`)
	f.Add("SPADE_PROCEDURAL = null\nclass X: pass")
	f.Add("")
	f.Fuzz(func(t *testing.T, src string) {
		if h := WriteHint(src); strings.TrimSpace(h) == "" {
			t.Fatalf("empty hint for %q", src)
		}
	})
}

// FuzzTextAct: the agent reads untrusted observation text; it must never
// panic and always answer with a non-empty action.
func FuzzTextAct(f *testing.F) {
	f.Add("You have 5 guesses.\nValid actions: guess <integer> (1 to 100)", "Too low: the count is higher than 50.", "The count always lies between 10 and 20.")
	f.Add("You are at (1, 2). The exit is at (3, 3).\nValid actions: north | east", "Blocked: a wall stops you.", "opens with 'east', 'east'")
	f.Add("Sequence so far: 1, 1, 2, 3\nValid actions: next <integer>", "Incorrect: the next term was 5.", "sum of the two previous")
	f.Add("Report f(20). You have 4 actions.\nValid actions: query 0 | query 1 | answer <integer>", "f(1) = 3.", "changes at x = 4; modulo 0")
	f.Add("Budget left: 5. Value so far: 0. Options: A (cost 9, value 2).\nValid actions: buy A | finish", "Refused", "'buy A'")
	f.Add("no list here", "", "")
	f.Fuzz(func(t *testing.T, obs, fb, hint string) {
		msgs := []model.Message{
			{Role: model.RoleSystem, Content: "Hint: " + hint},
			{Role: model.RoleUser, Content: obs},
			{Role: model.RoleAssistant, Content: "guess 50"},
			{Role: model.RoleUser, Content: fb + "\n" + obs},
		}
		if a := textAct(msgs, hint, 1, 0); a == "" {
			t.Fatal("empty action")
		}
		tools := []model.Tool{{Name: "get_order", Description: "Show an order", Parameters: `{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`}}
		_ = toolAct(append(msgs, model.Message{Role: model.RoleTool, Content: "Instruction 1 of 3: " + obs}), tools, hint, 1, 0)
	})
}

// FuzzExtractTerms: corpus text is untrusted; extraction must not panic and
// must always fill the requested number of names.
func FuzzExtractTerms(f *testing.F) {
	f.Add("Glaciers", "Glaciers form where snow accumulates over 30 years.")
	f.Add("", "")
	f.Add("A", "Ünïcode Wörds and ΑΒΓΔ letters 12 345 999999")
	f.Fuzz(func(t *testing.T, title, text string) {
		terms := ExtractTerms([]Document{{Title: title, Text: text}}, 8)
		if len(terms.Names) != 8 {
			t.Fatalf("%d names", len(terms.Names))
		}
		for _, n := range terms.Names {
			if strings.EqualFold(n, strings.TrimSpace(title)) {
				t.Fatalf("title %q returned as a term", title)
			}
		}
	})
}

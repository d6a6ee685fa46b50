package action

import (
	"testing"

	"github.com/stretchr/testify/require"
)

const obs = "Total: 3. Target: 9.\nValid actions: add 1 | add 2 | add 3 | pass"

func TestExtract(t *testing.T) {
	for _, tc := range []struct {
		format, reply, want string
		ok                  bool
	}{
		{FormatValidActions, "add 2", "add 2", true},
		{FormatValidActions, "  ADD 2 ", "add 2", true},
		{FormatValidActions, "**add 3**", "add 3", true},
		{FormatValidActions, "`pass`", "pass", true},
		{FormatValidActions, `"add 1".`, "add 1", true},
		{FormatValidActions, "Action: add 1", "add 1", true},
		{FormatValidActions, "I choose `add 3`.", "add 3", true},
		{FormatValidActions, "Rather than add 2, I take the other one.\nadd 1", "add 1", true},
		{FormatValidActions, "I will readd 1", "I will readd 1", false},
		{FormatValidActions, "jump", "jump", false},
		{FormatValidActions, "", "", false},
		{FormatBoxed, `Add 3 overshoots; so \boxed{add 2}`, "add 2", true},
		{FormatBoxed, `\boxed{add 1} no wait \boxed{ \text{add 3} }`, "add 3", true},
		{FormatBoxed, `\boxed{f(\{x\})}`, `f(\{x\})`, true},
		{FormatBoxed, `\boxed{add 2`, `\boxed{add 2`, false},
		{FormatBoxed, "add 2", "add 2", false},
		{FormatAnswerTag, "think... <answer>add 1</answer> then <answer> pass </answer>", "pass", true},
		{FormatAnswerTag, "<answer>add 1", "<answer>add 1", false},
		{FormatRaw, "  Add 2, please ", "Add 2, please", true},
	} {
		got, ok := Extract(tc.format, tc.reply, obs)
		require.Equal(t, tc.want, got, "%s %q", tc.format, tc.reply)
		require.Equal(t, tc.ok, ok, "%s %q", tc.format, tc.reply)
	}
	// The longest listed action that ends the reply wins.
	got, ok := Extract(FormatValidActions, "go north east", "Valid actions: east | north east")
	require.True(t, ok)
	require.Equal(t, "north east", got)
}

func TestValidActions(t *testing.T) {
	acts, ok := ValidActions("a\nValid actions: x | y\nmore\n  Valid actions: up | down |  \n")
	require.True(t, ok)
	require.Equal(t, []string{"up", "down"}, acts, "the last line counts")
	_, ok = ValidActions("Valid actions:  \nno list")
	require.False(t, ok)
	require.NoError(t, CheckFormat("boxed"))
	require.ErrorContains(t, CheckFormat("json"), "valid_actions, boxed, answer_tag, raw")
}

func FuzzExtract(f *testing.F) {
	f.Add(`\boxed{\boxed{a}}`, "Valid actions: a | b")
	f.Add("**b**", "Valid actions: a | b")
	f.Fuzz(func(t *testing.T, reply, o string) {
		for _, fm := range Formats() {
			if a, ok := Extract(fm, reply, o); ok && a == "" {
				t.Fatalf("%s: empty action reported as found for %q", fm, reply)
			}
		}
	})
}

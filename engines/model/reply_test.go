package model

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSplitThink(t *testing.T) {
	for _, tc := range []struct{ in, reasoning, answer string }{
		{"add 2", "", "add 2"},
		{"<think>\nmaybe add 3\n</think>\n\nThe gap is 2.\nadd 2", "maybe add 3", "The gap is 2.\nadd 2"},
		{"plan first</think>add 1", "plan first", "add 1"},
		{"<think>still thinking about", "still thinking about", ""},
		{"<think>a</think>x<think>b</think>y", "a\n\nb", "xy"},
		{"<think></think>add 1", "", "add 1"},
	} {
		r, a := SplitThink(tc.in)
		require.Equal(t, tc.reasoning, r, "%q", tc.in)
		require.Equal(t, tc.answer, a, "%q", tc.in)
	}
	r, a := ReplyParts(Message{Content: "<think>b</think> add 1", Reasoning: " a "})
	require.Equal(t, "a\n\nb", r)
	require.Equal(t, "add 1", a)
}

func TestParseToolCallText(t *testing.T) {
	tools := []Tool{{Name: "get_balance"}, {Name: "transfer"}}
	calls, rest, ok := ParseToolCallText("<think>x</think>\n<tool_call>\n{\"name\": \"get_balance\", \"arguments\": {\"account\": \"checking\"}}\n</tool_call>", tools)
	require.True(t, ok)
	require.Equal(t, "<think>x</think>", rest)
	require.Equal(t, []ToolCall{{Name: "get_balance", Arguments: `{"account": "checking"}`}}, calls)

	calls, rest, ok = ParseToolCallText("<tool_call>{\"name\":\"a\",\"arguments\":\"{\\\"k\\\":1}\"}</tool_call> and <tool_call>{\"name\": \"b\", \"parameters\": {}}", tools)
	require.True(t, ok, "calls of undeclared tools in tags are still calls: the environment answers")
	require.Equal(t, "and", rest)
	require.Equal(t, []ToolCall{{Name: "a", Arguments: `{"k":1}`}, {Name: "b", Arguments: "{}"}}, calls)

	calls, rest, ok = ParseToolCallText("```json\n{\"name\": \"transfer\", \"arguments\": {\"amount\": 5}}\n```", tools)
	require.True(t, ok)
	require.Empty(t, rest)
	require.Equal(t, "transfer", calls[0].Name)

	for _, s := range []string{`{"name": "unknown", "arguments": {}}`, "done", "<tool_call>not json</tool_call>", `{"answer": 1}`} {
		_, rest, ok := ParseToolCallText(s, tools)
		require.False(t, ok, s)
		require.Equal(t, s, rest)
	}
}

func FuzzSplitThink(f *testing.F) {
	f.Add("<think>a</think>b")
	f.Add("</think><think>")
	f.Fuzz(func(t *testing.T, s string) {
		_, a := SplitThink(s)
		if len(a) > len(s) {
			t.Fatalf("answer longer than the reply: %q", s)
		}
		_, _, _ = ParseToolCallText(s, []Tool{{Name: "x"}})
	})
}

package grpo

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/schemas"
)

// TestTrainMessages: grpo.train_reasoning generated trains what the model
// generated (reasoning in a <think> block before the answer); none trains
// the answers and drops a play with a turn that was all reasoning, so no
// agent sample trains an empty assistant turn the model did not produce.
func TestTrainMessages(t *testing.T) {
	msgs := []schemas.Message{
		{Role: "system", Content: "sys"},
		{Role: "user", Content: "obs"},
		{Role: "assistant", Content: "add 1", Reasoning: "gap is 1"},
		{Role: "user", Content: "obs2"},
		{Role: "assistant", Content: "add 2"},
	}
	got, ok := TrainMessages(msgs, "generated")
	require.True(t, ok)
	require.Equal(t, "<think>\ngap is 1\n</think>\n\nadd 1", got[2].Content)
	require.Equal(t, "add 2", got[4].Content)
	for _, m := range got {
		require.Empty(t, m.Reasoning)
	}
	require.Equal(t, "gap is 1", msgs[2].Reasoning, "the input is not changed")

	got, ok = TrainMessages(msgs, "none")
	require.True(t, ok)
	require.Equal(t, "add 1", got[2].Content)

	onlyThought := append([]schemas.Message(nil), msgs...)
	onlyThought[2] = schemas.Message{Role: "assistant", Reasoning: "still thinking"}
	_, ok = TrainMessages(onlyThought, "none")
	require.False(t, ok, "an all-reasoning turn would train an empty turn")
	got, ok = TrainMessages(onlyThought, "generated")
	require.True(t, ok)
	require.Equal(t, "<think>\nstill thinking\n</think>\n\n", got[2].Content)
}

package rollout_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/modeltest"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/stages/grpo"
)

// TestTokenIDsStored: against a server that returns token ids and
// log-probs in vLLM's shape (model.token_ids on), every assistant turn of
// every play stores the ids it sampled and their log-probs, and the
// prompt ids the server rendered, delta-coded against the previous turn
// (schemas.ExpandPrompts gives back each call's whole prompt); designs
// store theirs; train_batch carries them into the trainer's batch line
// (grpo.BatchSample) with every prompt whole.
func TestTokenIDsStored(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithBehaviour(modeltest.Behaviour{TokenIDs: true}))
	st, run := protocolRound(t, "protocol-token-ids", srv.URL, func(c *config.Config) { c.Model.TokenIDs = "on" })

	asModel := func(ms []schemas.Message) []model.Message {
		out := make([]model.Message, len(ms))
		for i, m := range ms {
			out[i] = model.Message{Role: m.Role, Content: m.Content}
		}
		return out
	}
	plays := table[schemas.Rollout](t, st, run, "rollouts")
	require.NotEmpty(t, plays)
	turns, shared := 0, 0
	for _, p := range plays {
		require.Empty(t, p.Error)
		prompts, err := schemas.ExpandPrompts(p.Messages)
		require.NoError(t, err)
		for i, m := range p.Messages {
			if m.Role != "assistant" {
				require.Empty(t, m.CompletionTokenIDs)
				continue
			}
			turns++
			want := modeltest.WordTokens(asModel(p.Messages[:i]), m.Content)
			require.Equal(t, want.CompletionIDs, m.CompletionTokenIDs, "play %s/%d turn %d", p.EnvID, p.Sample, i)
			require.Equal(t, want.Logprobs, m.CompletionLogprobs)
			require.Equal(t, want.PromptIDs, prompts[i], "the server's whole prompt, decoded")
			require.Positive(t, m.PromptTokens)
			if m.PromptShared > 0 {
				shared++
				require.Less(t, len(m.PromptTokenIDs), len(prompts[i]), "a later turn stores only what its prompt adds")
			}
		}
	}
	require.Positive(t, turns)
	require.Positive(t, shared, "multi-turn plays share their prompts' prefixes")

	designs := table[schemas.Design](t, st, run, "designs")
	require.NotEmpty(t, designs)
	for _, d := range designs {
		var msgs []schemas.Message
		require.NoError(t, json.Unmarshal([]byte(d.Prompt), &msgs))
		want := modeltest.WordTokens(asModel(msgs), d.Response)
		require.Equal(t, want.PromptIDs, d.PromptTokenIDs)
		require.Equal(t, want.CompletionIDs, d.CompletionTokenIDs)
		require.Equal(t, want.Logprobs, d.CompletionLogprobs)
	}

	batch := table[schemas.TrainSample](t, st, run, "train_batch")
	require.NotEmpty(t, batch)
	roles := map[string]int{}
	for _, b := range batch {
		s, err := grpo.BatchSample(b)
		require.NoError(t, err)
		for i, m := range s.Messages {
			if m.Role != "assistant" {
				continue
			}
			roles[b.Role]++
			require.NotEmpty(t, m.CompletionTokenIDs, "sample %s message %d", b.SampleID, i)
			require.Len(t, m.CompletionLogprobs, len(m.CompletionTokenIDs))
			require.NotEmpty(t, m.PromptTokenIDs)
			require.Equal(t, modeltest.WordTokens(asModel(b.Messages[:i]), b.Messages[i].Content).PromptIDs, m.PromptTokenIDs)
		}
	}
	require.Positive(t, roles["agent"])
	require.Positive(t, roles["designer"])
}

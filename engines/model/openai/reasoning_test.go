package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/modeltest"
)

// TestChatReasoningFields: reasoning_content (vLLM, SGLang) and reasoning
// (newer vLLM, OpenRouter) reach Message.Reasoning; content is kept as sent.
func TestChatReasoningFields(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithBehaviour(modeltest.Behaviour{ReasoningContent: true, Prose: true}))
	b := newBackend(t, srv, nil)
	req := model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "Total 0.\nValid actions: add 1 | add 2"}}}
	resp, err := b.Chat(context.Background(), req)
	require.NoError(t, err)
	m := resp.Choices[0].Message
	assert.Contains(t, m.Reasoning, "let me weigh the alternatives")
	assert.NotContains(t, m.Content, "weigh")
	assert.Equal(t, "stop", resp.Choices[0].FinishReason)

	assert.Equal(t, "r1", reasoningField(`{"content":"x","reasoning_content":"r1","reasoning":"r2"}`))
	assert.Equal(t, "r2", reasoningField(`{"content":"x","reasoning_content":null,"reasoning":"r2"}`))
	assert.Equal(t, "", reasoningField(`{"content":"x","reasoning":7}`))
}

// TestChatToolCallText: with tools declared, Hermes <tool_call> text in
// the content becomes tool calls (finish_reason tool_calls), the content
// staying as written; without tools the text is left alone.
func TestChatToolCallText(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithBehaviour(modeltest.Behaviour{Think: true, ToolCallText: true}))
	b := newBackend(t, srv, nil)
	req := model.Request{
		Messages: []model.Message{{Role: model.RoleUser, Content: "Check the balance."}},
		Tools:    []model.Tool{{Name: "get_balance", Parameters: `{"type":"object"}`}},
	}
	resp, err := b.Chat(context.Background(), req)
	require.NoError(t, err)
	ch := resp.Choices[0]
	require.Len(t, ch.Message.ToolCalls, 1)
	assert.Equal(t, "get_balance", ch.Message.ToolCalls[0].Name)
	assert.Equal(t, "{}", ch.Message.ToolCalls[0].Arguments)
	assert.Equal(t, "tool_calls", ch.FinishReason)
	assert.Contains(t, ch.Message.Content, "<tool_call>")
}

// TestChatToolRequestRejected: vLLM without --enable-auto-tool-choice
// answers 400 in its own error shape; the error is unwrapped and names the
// flag to start the server with.
func TestChatToolRequestRejected(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithBehaviour(modeltest.Behaviour{RejectTools: true, VLLMErrors: true}))
	b := newBackend(t, srv, nil)
	req := model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "x"}}, Tools: []model.Tool{{Name: "t"}}}
	_, err := b.Chat(context.Background(), req)
	var ce *model.CallError
	require.True(t, errors.As(err, &ce), "%v", err)
	assert.Equal(t, http.StatusBadRequest, ce.Status)
	assert.False(t, ce.Retryable)
	assert.Contains(t, err.Error(), `"auto" tool choice requires --enable-auto-tool-choice`)
	assert.Contains(t, err.Error(), AutoToolChoiceAdvice)
	assert.NotContains(t, err.Error(), `"object"`)
	_, err = b.Chat(context.Background(), model.Request{Messages: req.Messages})
	require.NoError(t, err, "requests without tools are served")
}

func TestVLLMErrorBodies(t *testing.T) {
	assert.Equal(t, "max_tokens is too large", errorMessage([]byte(`{"object":"error","message":"max_tokens is too large","type":"BadRequestError","param":null,"code":400}`)))
	assert.Equal(t, "Not Found", errorMessage([]byte(`{"detail":"Not Found"}`)))
	assert.Equal(t, "nope", errorMessage([]byte(`{"error":{"message":"nope","type":"x","code":400}}`)))
}

// TestChatExtraBodyAndToolChoice: model.extra_body's members go on the
// wire as they are; tool_choice only when set and only with tools.
func TestChatExtraBodyAndToolChoice(t *testing.T) {
	srv := modeltest.Start(t)
	b := newBackend(t, srv, func(c *Config) {
		c.ExtraBody = map[string]any{"chat_template_kwargs": map[string]any{"enable_thinking": false}, "top_k": 20}
		c.ToolChoice = "auto"
	})
	msgs := []model.Message{{Role: model.RoleUser, Content: "Valid actions: a | b"}}
	_, err := b.Chat(context.Background(), model.Request{Messages: msgs})
	require.NoError(t, err)
	_, err = b.Chat(context.Background(), model.Request{Messages: msgs, Tools: []model.Tool{{Name: "t"}}})
	require.NoError(t, err)
	plain := newBackend(t, srv, nil)
	_, err = plain.Chat(context.Background(), model.Request{Messages: msgs, Tools: []model.Tool{{Name: "t"}}})
	require.NoError(t, err)

	reqs := srv.Requests()
	require.Len(t, reqs, 3)
	var body map[string]any
	require.NoError(t, json.Unmarshal(reqs[0].Body, &body))
	assert.Equal(t, map[string]any{"enable_thinking": false}, body["chat_template_kwargs"])
	assert.EqualValues(t, 20, body["top_k"])
	assert.NotContains(t, reqs[0].Keys, "tool_choice", "no tools, no tool_choice")
	require.NoError(t, json.Unmarshal(reqs[1].Body, &body))
	assert.Equal(t, "auto", body["tool_choice"])
	assert.NotContains(t, reqs[2].Keys, "tool_choice", "not sent unless set")
	assert.NotContains(t, reqs[2].Keys, "chat_template_kwargs")
}

package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/spade-pipeline/spade/engines/model"
)

// toParams maps a model.Request onto the SDK's wire parameters. Meta is
// deliberately not mapped.
func toParams(modelName string, req model.Request) (oa.ChatCompletionNewParams, error) {
	if len(req.Messages) == 0 {
		return oa.ChatCompletionNewParams{}, fmt.Errorf("%w: no messages", model.ErrBadRequest)
	}
	if req.N < 0 || req.MaxTokens < 0 {
		return oa.ChatCompletionNewParams{}, fmt.Errorf("%w: negative n (%d) or max_tokens (%d)", model.ErrBadRequest, req.N, req.MaxTokens)
	}
	p := oa.ChatCompletionNewParams{
		Model:       shared.ChatModel(modelName),
		Temperature: oa.Float(req.Temperature),
		Seed:        oa.Int(req.Seed),
	}
	for i, m := range req.Messages {
		u, err := toMessage(m)
		if err != nil {
			return oa.ChatCompletionNewParams{}, fmt.Errorf("%w: message %d: %w", model.ErrBadRequest, i, err)
		}
		p.Messages = append(p.Messages, u)
	}
	for i, t := range req.Tools {
		if t.Name == "" {
			return oa.ChatCompletionNewParams{}, fmt.Errorf("%w: tool %d: empty name", model.ErrBadRequest, i)
		}
		fd := shared.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			fd.Description = oa.String(t.Description)
		}
		if strings.TrimSpace(t.Parameters) != "" {
			// Plain float64 numbers: the SDK's encoder writes json.Number
			// as a string, which would corrupt "minimum": 1.
			var schema map[string]any
			if err := json.Unmarshal([]byte(t.Parameters), &schema); err != nil || schema == nil {
				return oa.ChatCompletionNewParams{}, fmt.Errorf("%w: tool %d (%s): field parameters is not a JSON object", model.ErrBadRequest, i, t.Name)
			}
			fd.Parameters = shared.FunctionParameters(schema)
		}
		p.Tools = append(p.Tools, oa.ChatCompletionFunctionTool(fd))
	}
	if req.N > 1 {
		p.N = oa.Int(int64(req.N))
	}
	if req.TopP > 0 {
		p.TopP = oa.Float(req.TopP)
	}
	if req.MaxTokens > 0 {
		p.MaxTokens = oa.Int(int64(req.MaxTokens))
	}
	if len(req.Stop) > 0 {
		p.Stop = oa.ChatCompletionNewParamsStopUnion{OfStringArray: req.Stop}
	}
	return p, nil
}

func toMessage(m model.Message) (oa.ChatCompletionMessageParamUnion, error) {
	switch m.Role {
	case model.RoleSystem:
		return oa.SystemMessage(m.Content), nil
	case model.RoleUser:
		return oa.UserMessage(m.Content), nil
	case model.RoleTool:
		if m.ToolCallID == "" {
			return oa.ChatCompletionMessageParamUnion{}, errors.New("tool message without tool_call_id")
		}
		return oa.ToolMessage(m.Content, m.ToolCallID), nil
	case model.RoleAssistant:
		var a oa.ChatCompletionAssistantMessageParam
		if m.Content != "" || len(m.ToolCalls) == 0 {
			a.Content.OfString = param.NewOpt(m.Content)
		}
		for _, tc := range m.ToolCalls {
			a.ToolCalls = append(a.ToolCalls, oa.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &oa.ChatCompletionMessageFunctionToolCallParam{
					ID: tc.ID,
					Function: oa.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name:      tc.Name,
						Arguments: tc.Arguments,
					},
				},
			})
		}
		return oa.ChatCompletionMessageParamUnion{OfAssistant: &a}, nil
	default:
		return oa.ChatCompletionMessageParamUnion{}, fmt.Errorf("unknown role %q", m.Role)
	}
}

// fromCompletion maps the SDK's response onto model.Response, choices in
// index order. Message.Reasoning is the message's "reasoning_content"
// (vLLM and SGLang reasoning parsers), else its "reasoning" (newer vLLM,
// OpenRouter, Ollama). When the request declared tools and a message
// carries no tool_calls, the calls the model wrote as text are read from
// its content (model.ParseToolCallText: Hermes <tool_call> blocks, or a
// bare JSON call of a declared tool) and a finish_reason "stop" becomes
// "tool_calls", as a server running a tool parser answers; the content
// stays as the model wrote it (the caller drops the call text from what
// it sends back: model.ParseToolCallText's rest).
func fromCompletion(c *oa.ChatCompletion, tools []model.Tool) model.Response {
	choices := append([]oa.ChatCompletionChoice(nil), c.Choices...)
	sort.SliceStable(choices, func(i, j int) bool { return choices[i].Index < choices[j].Index })
	// Text from the server reaches Parquet, which needs valid UTF-8
	// (DuckDB refuses to read a file with an invalid string).
	valid := func(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
	out := model.Response{
		Model: valid(c.Model),
		Usage: model.Usage{
			PromptTokens:     tokenCount(c.Usage.PromptTokens),
			CompletionTokens: tokenCount(c.Usage.CompletionTokens),
		},
		Choices: make([]model.Choice, 0, len(choices)),
	}
	for _, ch := range choices {
		msg := model.Message{Role: model.RoleAssistant, Content: valid(ch.Message.Content), Reasoning: valid(reasoningField(ch.Message.RawJSON()))}
		for _, tc := range ch.Message.ToolCalls {
			call := model.ToolCall{ID: valid(tc.ID), Name: valid(tc.Function.Name), Arguments: valid(tc.Function.Arguments)}
			if tc.Type == "custom" {
				call.Name, call.Arguments = valid(tc.Custom.Name), valid(tc.Custom.Input)
			}
			msg.ToolCalls = append(msg.ToolCalls, call)
		}
		finish := valid(ch.FinishReason)
		if len(tools) > 0 && len(msg.ToolCalls) == 0 {
			if calls, _, ok := model.ParseToolCallText(msg.Content, tools); ok {
				msg.ToolCalls = calls
				if finish == "stop" {
					finish = "tool_calls"
				}
			}
		}
		out.Choices = append(out.Choices, model.Choice{Message: msg, FinishReason: finish, Tokens: choiceTokens(c.RawJSON(), ch.RawJSON())})
	}
	return out
}

// maxTokenID bounds a token id a server reports: vocabularies are below
// 2^24 entries; a larger or negative id is the server's error.
const maxTokenID = 1 << 31

// choiceTokens reads the token information of one choice from the raw
// JSON of the response (top) and of the choice (raw): prompt ids from the
// choice's prompt_token_ids (SGLang), else the response's (vLLM);
// completion ids from the choice's token_ids, else from its
// logprobs.content tokens when all are written "token_id:N" (vLLM's
// return_tokens_as_token_ids); log-probs from logprobs.content. A field
// that does not decode, or holds an id outside [0, 2^31) or a log-prob
// that is positive beyond rounding, is dropped on its own: token
// information is optional, and a sample without it is trained from its
// text. nil when nothing usable was sent.
func choiceTokens(top, raw string) *model.Tokens {
	var ch struct {
		PromptTokenIDs json.RawMessage `json:"prompt_token_ids"`
		TokenIDs       json.RawMessage `json:"token_ids"`
		Logprobs       struct {
			Content []struct {
				Token   string   `json:"token"`
				Logprob *float64 `json:"logprob"`
			} `json:"content"`
		} `json:"logprobs"`
	}
	var resp struct {
		PromptTokenIDs json.RawMessage `json:"prompt_token_ids"`
	}
	if json.Unmarshal([]byte(raw), &ch) != nil {
		return nil
	}
	_ = json.Unmarshal([]byte(top), &resp)
	var t model.Tokens
	t.PromptIDs = tokenIDs(ch.PromptTokenIDs)
	if t.PromptIDs == nil {
		t.PromptIDs = tokenIDs(resp.PromptTokenIDs)
	}
	t.CompletionIDs = tokenIDs(ch.TokenIDs)
	if content := ch.Logprobs.Content; len(content) > 0 {
		lps := make([]float64, 0, len(content))
		for _, c := range content {
			if c.Logprob == nil || *c.Logprob > 1e-6 || math.IsNaN(*c.Logprob) {
				lps = nil
				break
			}
			lps = append(lps, min(*c.Logprob, 0))
		}
		t.Logprobs = lps
		if t.CompletionIDs == nil {
			ids := make([]int64, 0, len(content))
			for _, c := range content {
				n, err := strconv.ParseInt(strings.TrimPrefix(c.Token, "token_id:"), 10, 64)
				if !strings.HasPrefix(c.Token, "token_id:") || err != nil || n < 0 || n >= maxTokenID {
					ids = nil
					break
				}
				ids = append(ids, n)
			}
			t.CompletionIDs = ids
		}
	}
	if t.PromptIDs == nil && t.CompletionIDs == nil && t.Logprobs == nil {
		return nil
	}
	return &t
}

// tokenIDs decodes a JSON list of token ids; nil when raw is absent, null,
// empty, not a list of integers, or holds an id outside [0, 2^31).
func tokenIDs(raw json.RawMessage) []int64 {
	if len(raw) == 0 {
		return nil
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) != nil || len(ids) == 0 {
		return nil
	}
	for _, id := range ids {
		if id < 0 || id >= maxTokenID {
			return nil
		}
	}
	return ids
}

// reasoningField reads the reasoning text of a raw message object:
// "reasoning_content", else "reasoning"; "" when neither is a string.
func reasoningField(raw string) string {
	var m struct {
		ReasoningContent *string `json:"reasoning_content"`
		Reasoning        *string `json:"reasoning"`
	}
	if raw == "" || json.Unmarshal([]byte(raw), &m) != nil {
		return ""
	}
	if m.ReasoningContent != nil && *m.ReasoningContent != "" {
		return *m.ReasoningContent
	}
	if m.Reasoning != nil {
		return *m.Reasoning
	}
	return ""
}

// tokenCount keeps a server's usage count within [0, 10^12] tokens: a
// negative or absurd count is the server's error, not a measurement.
func tokenCount(n int64) int {
	return int(min(max(n, 0), 1_000_000_000_000))
}

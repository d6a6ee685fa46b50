package modeltest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/spade-pipeline/spade/engines/model"
)

// The wire types below follow the OpenAI chat-completions API reference
// (POST /v1/chat/completions): request body and the non-streaming
// "chat.completion" object. Only fields the pipeline uses are modelled;
// unknown request keys are kept in Request.Keys.

type wireRequest struct {
	Model               string          `json:"model"`
	Messages            []wireMessage   `json:"messages"`
	Tools               []wireTool      `json:"tools"`
	N                   *int            `json:"n"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Seed                *int64          `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	Stream              bool            `json:"stream"`
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	ToolCalls  []wireToolCall  `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

type wireToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type wireTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

type wireChoice struct {
	Index        int             `json:"index"`
	Message      wireOutMessage  `json:"message"`
	Logprobs     json.RawMessage `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
	// TokenIDs is vLLM's per-choice token_ids (return_token_ids).
	TokenIDs []int64 `json:"token_ids,omitempty"`
}

type wireLogprob struct {
	Token       string  `json:"token"`
	Logprob     float64 `json:"logprob"`
	Bytes       []int   `json:"bytes"`
	TopLogprobs []any   `json:"top_logprobs"`
}

type wireOutMessage struct {
	Role    string  `json:"role"`
	Content *string `json:"content"`
	Refusal *string `json:"refusal"`
	// ReasoningContent is vLLM's and SGLang's field for the reasoning a
	// reasoning parser split off the content.
	ReasoningContent *string        `json:"reasoning_content,omitempty"`
	ToolCalls        []wireToolCall `json:"tool_calls,omitempty"`
}

type wireUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

type wireCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []wireChoice `json:"choices"`
	Usage             wireUsage    `json:"usage"`
	SystemFingerprint string       `json:"system_fingerprint"`
	// PromptTokenIDs is vLLM's top-level prompt_token_ids.
	PromptTokenIDs []int64 `json:"prompt_token_ids,omitempty"`
}

// decodeRequest parses a chat-completions body into the model view; with
// wantKeys it also lists the body's top-level keys (a second parse, skipped
// in benchmarks).
func decodeRequest(body []byte, wantKeys bool) (model.Request, string, []string, error) {
	var names []string
	if wantKeys {
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(body, &keys); err != nil {
			return model.Request{}, "", nil, fmt.Errorf("request body is not a JSON object: %w", err)
		}
		names = make([]string, 0, len(keys))
		for k := range keys {
			names = append(names, k)
		}
		sort.Strings(names)
	}
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return model.Request{}, "", names, fmt.Errorf("request body: %w", err)
	}
	if w.Model == "" {
		return model.Request{}, "", names, fmt.Errorf("request body: field model is required")
	}
	if len(w.Messages) == 0 {
		return model.Request{}, w.Model, names, fmt.Errorf("request body: field messages must be a non-empty array")
	}
	if w.Stream {
		return model.Request{}, w.Model, names, fmt.Errorf("request body: stream=true is not supported by this test server")
	}
	var r model.Request
	for i, m := range w.Messages {
		text, err := contentText(m.Content)
		if err != nil {
			return model.Request{}, w.Model, names, fmt.Errorf("request body: messages[%d].content: %w", i, err)
		}
		msg := model.Message{Role: m.Role, Content: text, ToolCallID: m.ToolCallID}
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, model.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		r.Messages = append(r.Messages, msg)
	}
	for _, t := range w.Tools {
		params := ""
		if len(t.Function.Parameters) > 0 && string(t.Function.Parameters) != "null" {
			var buf bytes.Buffer
			if err := json.Compact(&buf, t.Function.Parameters); err == nil {
				params = buf.String()
			}
		}
		r.Tools = append(r.Tools, model.Tool{Name: t.Function.Name, Description: t.Function.Description, Parameters: params})
	}
	if w.N != nil {
		r.N = *w.N
	}
	if w.Temperature != nil {
		r.Temperature = *w.Temperature
	}
	if w.TopP != nil {
		r.TopP = *w.TopP
	}
	switch {
	case w.MaxTokens != nil:
		r.MaxTokens = *w.MaxTokens
	case w.MaxCompletionTokens != nil:
		r.MaxTokens = *w.MaxCompletionTokens
	}
	if w.Seed != nil {
		r.Seed = *w.Seed
	}
	if len(w.Stop) > 0 && string(w.Stop) != "null" {
		var one string
		if json.Unmarshal(w.Stop, &one) == nil {
			r.Stop = []string{one}
		} else if err := json.Unmarshal(w.Stop, &r.Stop); err != nil {
			return model.Request{}, w.Model, names, fmt.Errorf("request body: field stop must be a string or array of strings")
		}
	}
	return r, w.Model, names, nil
}

// contentText accepts the three shapes OpenAI clients send: a string, null,
// or an array of content parts whose text parts are concatenated.
func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("neither a string nor an array of content parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

// encodeCompletion renders a Reply in the chat.completion wire format.
func encodeCompletion(id int64, modelName string, req model.Request, choices []model.Choice, usage *model.Usage) ([]byte, error) {
	out := wireCompletion{
		ID:                fmt.Sprintf("chatcmpl-modeltest-%d", id),
		Object:            "chat.completion",
		Model:             modelName,
		SystemFingerprint: "modeltest",
		Choices:           make([]wireChoice, 0, len(choices)),
	}
	completion := 0
	for i, c := range choices {
		msg := wireOutMessage{Role: "assistant"}
		if c.Message.Reasoning != "" {
			r := c.Message.Reasoning
			msg.ReasoningContent = &r
			completion += approxTokens(r)
		}
		if c.Message.Content != "" || (len(c.Message.ToolCalls) == 0 && c.Message.Reasoning == "") {
			content := c.Message.Content
			msg.Content = &content
		}
		for j, tc := range c.Message.ToolCalls {
			callID := tc.ID
			if callID == "" {
				callID = fmt.Sprintf("call_%d_%d_%d", id, i, j)
			}
			msg.ToolCalls = append(msg.ToolCalls, wireToolCall{ID: callID, Type: "function", Function: wireFunction{Name: tc.Name, Arguments: tc.Arguments}})
			completion += approxTokens(tc.Name) + approxTokens(tc.Arguments)
		}
		completion += approxTokens(c.Message.Content)
		finish := c.FinishReason
		if finish == "" {
			finish = "stop"
			if len(c.Message.ToolCalls) > 0 {
				finish = "tool_calls"
			}
		}
		wc := wireChoice{Index: i, Message: msg, Logprobs: json.RawMessage("null"), FinishReason: finish}
		if t := c.Tokens; t != nil {
			// vLLM's shape: ids per choice, the prompt's at the top level,
			// log-probs per token written "token_id:N".
			wc.TokenIDs = t.CompletionIDs
			if t.PromptIDs != nil {
				out.PromptTokenIDs = t.PromptIDs
			}
			if len(t.Logprobs) > 0 {
				lps := make([]wireLogprob, len(t.Logprobs))
				for k, lp := range t.Logprobs {
					tok := "?"
					if k < len(t.CompletionIDs) {
						tok = fmt.Sprintf("token_id:%d", t.CompletionIDs[k])
					}
					lps[k] = wireLogprob{Token: tok, Logprob: lp, Bytes: []int{}, TopLogprobs: []any{}}
				}
				wc.Logprobs, _ = json.Marshal(map[string]any{"content": lps})
			}
		}
		out.Choices = append(out.Choices, wc)
	}
	if usage != nil {
		out.Usage = wireUsage{PromptTokens: usage.PromptTokens, CompletionTokens: usage.CompletionTokens}
	} else {
		prompt := 0
		for _, m := range req.Messages {
			prompt += approxTokens(m.Content) + 4
		}
		out.Usage = wireUsage{PromptTokens: prompt, CompletionTokens: completion}
	}
	out.Usage.TotalTokens = out.Usage.PromptTokens + out.Usage.CompletionTokens
	return json.Marshal(out)
}

// approxTokens is a deterministic stand-in for a tokenizer: about four
// bytes of English per token.
func approxTokens(s string) int { return (len(s) + 3) / 4 }

// vllmErrorBody renders vLLM's ErrorResponse as its OpenAI-compatible
// server sends it: the fields at the top level, "object": "error", the
// HTTP status as code.
func vllmErrorBody(message, typ string, status int) []byte {
	b, _ := json.Marshal(map[string]any{"object": "error", "message": message, "type": typ, "param": nil, "code": status})
	return b
}

// errorBody renders an OpenAI-style error object.
func errorBody(message, typ, code string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]any{
		"message": message, "type": typ, "param": nil, "code": code,
	}})
	return b
}

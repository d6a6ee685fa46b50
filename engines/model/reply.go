package model

import (
	"encoding/json"
	"strings"
)

// Reasoning-block markers as Qwen3, DeepSeek-R1 and QwQ write them in the
// content when the server runs no reasoning parser.
const (
	ThinkOpen  = "<think>"
	ThinkClose = "</think>"
)

// FinishLength is the finish_reason of a sample cut at its max_tokens
// (OpenAI and vLLM spell it "length").
const FinishLength = "length"

// SplitThink separates the reasoning a model wrote inside <think> blocks
// from its answer. Every <think>...</think> block is removed from the
// answer and its text goes to reasoning (blocks joined by a blank line);
// a </think> with no opening tag before it (templates that open the block
// in the generation prompt, as Qwen3 thinking models do) makes everything
// before it reasoning; an unterminated <think> (the sample was cut while
// thinking) makes everything after it reasoning. answer is trimmed of
// surrounding whitespace; text without markers comes back unchanged as
// answer (trimmed), with reasoning "".
func SplitThink(content string) (reasoning, answer string) {
	var thoughts []string
	rest := content
	if i := strings.Index(rest, ThinkClose); i >= 0 {
		if j := strings.Index(rest, ThinkOpen); j < 0 || j > i {
			thoughts = append(thoughts, strings.TrimSpace(rest[:i]))
			rest = rest[i+len(ThinkClose):]
		}
	}
	var b strings.Builder
	for {
		i := strings.Index(rest, ThinkOpen)
		if i < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i])
		rest = rest[i+len(ThinkOpen):]
		j := strings.Index(rest, ThinkClose)
		if j < 0 {
			thoughts = append(thoughts, strings.TrimSpace(rest))
			break
		}
		thoughts = append(thoughts, strings.TrimSpace(rest[:j]))
		rest = rest[j+len(ThinkClose):]
	}
	var kept []string
	for _, t := range thoughts {
		if t != "" {
			kept = append(kept, t)
		}
	}
	return strings.Join(kept, "\n\n"), strings.TrimSpace(b.String())
}

// ReplyParts is an assistant message split into what the model thought and
// what it answered: Reasoning is the server's reasoning field and any
// <think> blocks of the content (in that order, joined by a blank line);
// Answer is the content without them, trimmed.
func ReplyParts(m Message) (reasoning, answer string) {
	r, a := SplitThink(m.Content)
	switch {
	case m.Reasoning == "":
		return r, a
	case r == "":
		return strings.TrimSpace(m.Reasoning), a
	default:
		return strings.TrimSpace(m.Reasoning) + "\n\n" + r, a
	}
}

// Tool-call markers of the Hermes format, which Qwen2.5 and Qwen3 write in
// their content when the server runs no tool-call parser.
const (
	ToolCallOpen  = "<tool_call>"
	ToolCallClose = "</tool_call>"
)

// ParseToolCallText reads the tool calls a model wrote as text, for a
// server that returned none in tool_calls: every <tool_call>{json}
// </tool_call> block (an unterminated last block runs to the end: a cut
// sample), or else a content that is one bare JSON object (optionally in a
// ``` fence) naming one of the declared tools. Each call's JSON is
// {"name": ..., "arguments": {...}} ("parameters" is accepted for
// "arguments", as Llama 3 writes it). rest is the content without the
// blocks, trimmed ("" for a bare JSON call), as vLLM's hermes parser
// returns it. Calls get no ID (the caller assigns one). A block whose JSON
// does not parse or has no string name is left in rest. ok is false when
// no call was found (rest is then content unchanged).
func ParseToolCallText(content string, tools []Tool) (calls []ToolCall, rest string, ok bool) {
	if strings.Contains(content, ToolCallOpen) {
		var b strings.Builder
		s := content
		for {
			i := strings.Index(s, ToolCallOpen)
			if i < 0 {
				b.WriteString(s)
				break
			}
			b.WriteString(s[:i])
			body := s[i+len(ToolCallOpen):]
			end := len(body)
			next := ""
			if j := strings.Index(body, ToolCallClose); j >= 0 {
				end, next = j, body[j+len(ToolCallClose):]
			}
			if tc, good := decodeToolCall(body[:end]); good {
				calls = append(calls, tc)
			} else {
				b.WriteString(s[i : i+len(ToolCallOpen)+end])
				if end < len(body) {
					b.WriteString(ToolCallClose)
				}
			}
			s = next
		}
		if len(calls) > 0 {
			return calls, strings.TrimSpace(b.String()), true
		}
		return nil, content, false
	}
	text := strings.TrimSpace(content)
	if strings.HasPrefix(text, "```") {
		if nl := strings.IndexByte(text, '\n'); nl >= 0 && strings.HasSuffix(text, "```") && len(text) > nl+3 {
			text = strings.TrimSpace(text[nl+1 : len(text)-3])
		}
	}
	if !strings.HasPrefix(text, "{") {
		return nil, content, false
	}
	tc, good := decodeToolCall(text)
	if !good {
		return nil, content, false
	}
	for _, t := range tools {
		if t.Name == tc.Name {
			return []ToolCall{tc}, "", true
		}
	}
	return nil, content, false
}

// decodeToolCall reads one {"name", "arguments"|"parameters"} object.
func decodeToolCall(text string) (ToolCall, bool) {
	var v struct {
		Name       *string         `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(text)), &v); err != nil || v.Name == nil || strings.TrimSpace(*v.Name) == "" {
		return ToolCall{}, false
	}
	args := v.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = v.Parameters
	}
	tc := ToolCall{Name: *v.Name, Arguments: "{}"}
	if len(args) > 0 && string(args) != "null" {
		var s string
		if json.Unmarshal(args, &s) == nil {
			// Arguments already as JSON text, as the OpenAI wire format has it.
			tc.Arguments = s
		} else {
			tc.Arguments = string(args)
		}
	}
	return tc, true
}

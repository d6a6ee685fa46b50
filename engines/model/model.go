// Package model is the one interface both SPADE roles (environment designer
// and reasoning agent, docs/method.md "The idea") use to reach a language model,
// plus the types that cross it. Backends live in subpackages: openai (any
// OpenAI-compatible server), procedural (the offline stand-in), and the
// record/replay wrappers.
package model

import "context"

// Roles of a chat message, as in the OpenAI chat-completions wire format.
const (
	RoleSystem    = "system"
	RoleUser      = "user"
	RoleAssistant = "assistant"
	RoleTool      = "tool"
)

// Message is one chat message as the Backend interface takes and returns
// it. It differs from the two other message types on purpose:
// schemas.Message is the stored table row (tool calls as one JSON text,
// token ids delta-coded, pinned by golden digests) and grpo.Message the
// trainer's batch-file turn (OpenAI's nested tool_calls, whole prompt
// ids); this one carries structured ToolCalls and no token ids (a
// sample's ids and log-probs are the Choice's).
type Message struct {
	// Role is one of RoleSystem, RoleUser, RoleAssistant, RoleTool.
	Role string `json:"role"`
	// Content is the message text (may be empty for an assistant message
	// that only carries tool calls). For an answer from a server it is the
	// content as sent, <think> blocks included (SplitThink separates them).
	Content string `json:"content"`
	// Reasoning is the reasoning text a server sent beside the content
	// (vLLM and SGLang reasoning parsers: "reasoning_content", newer vLLM
	// and OpenRouter: "reasoning"); "" when none was sent. It is never sent
	// back to a server (chat templates drop or re-render past reasoning
	// themselves).
	Reasoning string `json:"reasoning,omitempty"`
	// ToolCalls are the function calls an assistant message makes.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID links a RoleTool message to the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
}

// ToolCall is one function call made by the model.
type ToolCall struct {
	// ID is the call id the model (or server) assigned.
	ID string `json:"id"`
	// Name is the function name.
	Name string `json:"name"`
	// Arguments is the JSON object text of the arguments, as the model wrote
	// it (it may be malformed; callers validate).
	Arguments string `json:"arguments"`
}

// Tool declares one function the model may call (OpenAI "function" tool).
type Tool struct {
	// Name is the function name the model calls it by.
	Name string `json:"name"`
	// Description tells the model what the function does.
	Description string `json:"description"`
	// Parameters is a JSON Schema object, as JSON text.
	Parameters string `json:"parameters"`
}

// Request is one chat call. Sampling parameters left at zero use the
// backend's defaults, except Temperature, which is always sent.
type Request struct {
	// Messages is the conversation so far, oldest first.
	Messages []Message `json:"messages"`
	// Tools the model may call; empty for plain chat.
	Tools []Tool `json:"tools,omitempty"`
	// N is the number of samples to draw (>= 1; 0 means 1).
	N int `json:"n,omitempty"`
	// Temperature and TopP are the usual sampling parameters.
	Temperature float64 `json:"temperature"`
	// TopP is the nucleus-sampling probability mass; 0 leaves it to the
	// backend (the openai backend sends it only when > 0).
	TopP float64 `json:"top_p,omitempty"`
	// MaxTokens bounds each sample's completion length in tokens (0 = backend default).
	MaxTokens int `json:"max_tokens,omitempty"`
	// Seed makes sampling reproducible where the server supports it.
	Seed int64 `json:"seed"`
	// Stop sequences end a sample early.
	Stop []string `json:"stop,omitempty"`
	// Meta carries structured context about the call that is not sent to a
	// remote server but is part of the request hash: "spade.task" (design,
	// hint, agent), "spade.kind", "spade.skill", "spade.setting", and other
	// keys documented where they are set. The procedural backend reads it in
	// place of understanding the prompt.
	Meta map[string]string `json:"meta,omitempty"`
}

// Choice is one sample of a response.
type Choice struct {
	// Message is the sampled assistant message.
	Message Message `json:"message"`
	// FinishReason is "stop", "length", "tool_calls" or the server's word.
	FinishReason string `json:"finish_reason"`
	// Tokens is what the server reported of the sample's tokens (vLLM's
	// and SGLang's return_token_ids and logprobs, docs/models.md "Token
	// ids and log-probs"); nil when it reported none (the procedural
	// backend, a server without the extensions, or a backend that did not
	// ask).
	Tokens *Tokens `json:"tokens,omitempty"`
}

// Tokens is one sample as the server tokenized it: the prompt as it
// rendered and tokenized the request (its chat template), and the
// completion as sampled with the sampler's log-probs. Every field may be
// empty on its own when the server reported only part of it.
type Tokens struct {
	// PromptIDs are the prompt's token ids as the server rendered and
	// tokenized the request (vLLM's top-level prompt_token_ids, SGLang's
	// per-choice one); nil when not reported.
	PromptIDs []int64 `json:"prompt_ids,omitempty"`
	// CompletionIDs are the sampled token ids in order (vLLM and SGLang
	// token_ids, else the ids of logprobs.content when the server wrote
	// its tokens as "token_id:N"), including the end-of-turn token when
	// the server counts it; nil when not reported.
	CompletionIDs []int64 `json:"completion_ids,omitempty"`
	// Logprobs is the sampler's natural-log probability of each sampled
	// token (logprobs.content[].logprob), parallel to CompletionIDs when
	// both are present; nil when not reported.
	Logprobs []float64 `json:"logprobs,omitempty"`
}

// Usage counts tokens as the server reports them.
type Usage struct {
	// PromptTokens is the prompt's length in tokens (the procedural backend
	// counts whitespace-separated words).
	PromptTokens int `json:"prompt_tokens"`
	// CompletionTokens is the length of all choices together, in tokens,
	// counted the same way.
	CompletionTokens int `json:"completion_tokens"`
}

// Response is what a backend returns for one Request.
type Response struct {
	// Model is the model name the server reports.
	Model string `json:"model"`
	// Choices holds N samples, in order.
	Choices []Choice `json:"choices"`
	// Usage is the token usage of the whole call.
	Usage Usage `json:"usage"`
}

// Backend is a chat model. Chat must be safe for concurrent use, honour ctx
// (a cancelled ctx returns promptly with an error wrapping ctx.Err()), and
// return an error (never an empty Response) when no sample could be drawn.
type Backend interface {
	// Chat sends one chat request and returns the model's answer: on
	// success Response.Choices holds at least one sample (the procedural
	// backend returns max(1, req.N); the openai backend returns the
	// choices the server sent, in index order), with Usage in tokens.
	//
	// Errors: an error wrapping ctx.Err() when ctx is done before or
	// during the call. Beyond that each backend documents its own: the
	// openai backend returns *CallError after its retries (errors.Is works
	// for ErrEmptyResponse, ErrMalformedResponse, ErrTimeout and
	// ctx.Err()) and an error wrapping ErrBadRequest for a request it
	// cannot put on the wire; the procedural backend wraps
	// procedural.ErrBadRequest for a Meta it cannot use; replay.Replayer
	// wraps replay.ErrMiss when no recorded call matches and
	// replay.ErrRecordedFailure when the recorded call failed;
	// replay.Recorder returns the wrapped backend's error unchanged, or
	// the error of replay.Canonical when the request cannot be hashed.
	Chat(ctx context.Context, req Request) (Response, error)
	// Name identifies the backend and model, e.g. "openai:qwen3-8b" or
	// "procedural:v1"; it is recorded in tables.
	Name() string
}

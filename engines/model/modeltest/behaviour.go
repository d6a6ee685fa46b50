package modeltest

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"strconv"
	"strings"

	"github.com/spade-pipeline/spade/engines/model"
)

// Behaviour is how a real model and its server answer, one switch per
// habit seen with Qwen3 and smaller instruct models behind vLLM. The zero
// value answers as DefaultHandler does: bare actions, tool calls in
// tool_calls, OpenAI-shaped error bodies. The agent's choice of action
// never depends on the Behaviour (it is a hash of the observations, the
// seed and the sample index), so rounds against two behaviours play the
// same actions when the client reads them right.
type Behaviour struct {
	// Think starts every answer (agent, hint, designer) with a
	// <think>...</think> block in the content, as Qwen3 with thinking on
	// answers through a server without a reasoning parser. The reasoning
	// names an action other than the one chosen, so a client that does not
	// strip it steps the wrong text.
	Think bool
	// ReasoningContent sends that reasoning in the message's
	// "reasoning_content" field instead (vLLM --reasoning-parser qwen3).
	ReasoningContent bool
	// Prose makes the agent write a sentence before its action, which
	// stands alone on the last line.
	Prose bool
	// Boxed makes the agent reason in prose and end with \boxed{action},
	// the public code's protocol.
	Boxed bool
	// AnswerTag makes the agent end with <answer>action</answer>.
	AnswerTag bool
	// Weak makes the agent wrap its action the way weaker models do,
	// rotating through "Action: X", "**X**" and "I choose `X`.".
	Weak bool
	// ToolCallText makes tool calls come as Hermes text in the content,
	// <tool_call>{"name": ..., "arguments": {...}}</tool_call>, with no
	// tool_calls (Qwen3 through a server without a tool-call parser).
	ToolCallText bool
	// CutAgentEvery > 0 cuts the agent answer of every turn whose
	// observation hash falls in 1/CutAgentEvery of the space: the reply is
	// its first few words (an unterminated <think> under Think) with
	// finish_reason "length", as a turn that ran out of max_tokens.
	CutAgentEvery int
	// CutHint cuts hint answers the same way.
	CutHint bool
	// CutDesign cuts designer answers the same way: half the code, no
	// closing fence.
	CutDesign bool
	// RejectTools answers HTTP 400 with AutoToolChoiceMessage to every
	// request that declares tools, as vLLM does without
	// --enable-auto-tool-choice.
	RejectTools bool
	// VLLMErrors writes error bodies in vLLM's ErrorResponse shape
	// ({"object": "error", "message": ..., "type": ..., "code": 400})
	// instead of OpenAI's {"error": {...}}.
	VLLMErrors bool
	// TokenIDs answers a request that asks for token ids
	// (return_token_ids) as vLLM does: prompt_token_ids, token_ids and
	// logprobs.content, from WordTokens, a deterministic word-level
	// stand-in for a tokenizer and chat template whose rendering of a
	// conversation extends the previous turn's prompt and completion.
	TokenIDs bool
}

// Token ids of WordTokens' chat template: a role marker opens each
// message, EndID closes it.
const (
	EndID       = 2
	roleIDBase  = 3 // + index in system, user, assistant, tool
	wordIDFirst = 16
	wordIDSpan  = 50000
)

// WordTokens is the TokenIDs behaviour's tokenization of a call: the
// prompt is, per message, its role id, its content's word ids and EndID,
// then the assistant role id (the generation prompt); the completion is
// the reply content's word ids and EndID. A word's id is a hash of the
// word; its log-prob is a function of the id in [-1, 0).
func WordTokens(msgs []model.Message, reply string) model.Tokens {
	role := map[string]int64{model.RoleSystem: 0, model.RoleUser: 1, model.RoleAssistant: 2, model.RoleTool: 3}
	var t model.Tokens
	for _, m := range msgs {
		t.PromptIDs = append(append(append(t.PromptIDs, roleIDBase+role[m.Role]), wordIDs(m.Content)...), EndID)
	}
	t.PromptIDs = append(t.PromptIDs, roleIDBase+2)
	t.CompletionIDs = append(wordIDs(reply), EndID)
	for _, id := range t.CompletionIDs {
		t.Logprobs = append(t.Logprobs, -float64(id%1000+1)/1001)
	}
	return t
}

func wordIDs(s string) []int64 {
	var out []int64
	for _, w := range strings.Fields(s) {
		h := fnv.New32a()
		_, _ = io.WriteString(h, w)
		out = append(out, wordIDFirst+int64(h.Sum32()%wordIDSpan))
	}
	return out
}

// BehavingHandler is DefaultHandler(envSource, hint) answering the way b
// describes (see Behaviour). It answers N choices (N <= 0 means 1).
func BehavingHandler(envSource, hint string, b Behaviour) Handler {
	return func(req Request) Reply {
		n := req.Chat.N
		if n <= 0 {
			n = 1
		}
		choices := make([]model.Choice, n)
		role := Classify(req.Chat)
		for i := range choices {
			var ch model.Choice
			switch role {
			case RoleDesign:
				ch = b.design(envSource)
			case RoleHint:
				ch = b.hint(hint)
			default:
				ch = b.agent(req.Chat, i)
			}
			if b.TokenIDs && asksTokens(req) {
				t := WordTokens(req.Chat.Messages, ch.Message.Content)
				ch.Tokens = &t
			}
			choices[i] = ch
		}
		return Reply{Choices: choices}
	}
}

// asksTokens reports whether the request asked for token ids.
func asksTokens(req Request) bool {
	for _, k := range req.Keys {
		if k == "return_token_ids" {
			return true
		}
	}
	return false
}

// think puts reasoning where b says: a <think> block before content, or
// the reasoning field.
func (b Behaviour) think(reasoning, content string) model.Message {
	m := model.Message{Role: model.RoleAssistant, Content: content}
	switch {
	case b.ReasoningContent:
		m.Reasoning = reasoning
	case b.Think:
		m.Content = model.ThinkOpen + "\n" + reasoning + "\n" + model.ThinkClose + "\n\n" + content
	}
	return m
}

// cut is an answer that ran out of tokens: the start of what it would
// have said, finish_reason "length".
func (b Behaviour) cut(reasoning, content string) model.Choice {
	m := model.Message{Role: model.RoleAssistant}
	switch {
	case b.ReasoningContent:
		m.Reasoning = firstWords(reasoning, 6)
	case b.Think:
		m.Content = model.ThinkOpen + "\n" + firstWords(reasoning, 6)
	default:
		m.Content = firstWords(content, 3)
	}
	return model.Choice{Message: m, FinishReason: model.FinishLength}
}

func firstWords(s string, n int) string {
	f := strings.Fields(s)
	if len(f) > n {
		f = f[:n]
	}
	return strings.Join(f, " ")
}

func (b Behaviour) design(envSource string) model.Choice {
	content := "Here is the environment.\n\n```python\n" + envSource + "```\n"
	reasoning := "The designer should write a small game with a clear target and three actions."
	if b.CutDesign {
		ch := b.cut(reasoning, content)
		if !b.Think && !b.ReasoningContent {
			ch.Message.Content = "Here is the environment.\n\n```python\n" + envSource[:len(envSource)/2]
		}
		return ch
	}
	return model.Choice{Message: b.think(reasoning, content)}
}

func (b Behaviour) hint(hint string) model.Choice {
	reasoning := "The environment rewards reaching the target exactly; say how to close the gap."
	if b.CutHint {
		return b.cut(reasoning, hint)
	}
	return model.Choice{Message: b.think(reasoning, hint)}
}

// agent answers one agent turn: the same choice DefaultHandler makes,
// dressed as b says.
func (b Behaviour) agent(req model.Request, sample int) model.Choice {
	pick := observationHash(req, sample)
	if len(req.Tools) > 0 {
		t := req.Tools[pick%uint64(len(req.Tools))]
		reasoning := "I should call " + t.Name + " first."
		if b.CutAgentEvery > 0 && pick%uint64(b.CutAgentEvery) == 0 {
			ch := b.cut(reasoning, "")
			if !b.Think && !b.ReasoningContent {
				ch.Message.Content = model.ToolCallOpen + `{"name": "` + t.Name
			}
			return ch
		}
		if b.ToolCallText {
			body, _ := json.Marshal(map[string]any{"name": t.Name, "arguments": map[string]any{}})
			return model.Choice{Message: b.think(reasoning, model.ToolCallOpen+"\n"+string(body)+"\n"+model.ToolCallClose)}
		}
		m := b.think(reasoning, "")
		m.ToolCalls = []model.ToolCall{{ID: "call_" + strconv.FormatUint(pick%1_000_000, 10), Name: t.Name, Arguments: "{}"}}
		return model.Choice{Message: m}
	}
	actions := lastValidActions(req.Messages)
	act := "done"
	decoy := "wait"
	if len(actions) > 0 {
		act = actions[pick%uint64(len(actions))]
		decoy = actions[(pick+1)%uint64(len(actions))]
	}
	reasoning := fmt.Sprintf("Option %s looks tempting, but let me weigh the alternatives before I answer.", decoy)
	content := act
	switch {
	case b.Boxed:
		content = fmt.Sprintf("Looking at the state, %s seems weaker here. So my final action is \\boxed{%s}", decoy, act)
	case b.AnswerTag:
		content = fmt.Sprintf("Comparing the options, %s is not best.\n<answer>%s</answer>", decoy, act)
	case b.Weak:
		switch pick % 3 {
		case 0:
			content = "Action: " + act
		case 1:
			content = "**" + act + "**"
		default:
			content = "I choose `" + act + "`."
		}
	case b.Prose:
		content = fmt.Sprintf("Rather than %s, I will take the other move this turn.\n%s", decoy, act)
	}
	if b.CutAgentEvery > 0 && pick%uint64(b.CutAgentEvery) == 0 {
		return b.cut(reasoning, content)
	}
	return model.Choice{Message: b.think(reasoning, content)}
}

// observationHash picks the agent's answer from what the environment said
// (user and tool messages), the seed and the sample index: not from the
// agent's own earlier replies, whose wording depends on the Behaviour, nor
// from the system prompt, whose wording depends on rollout.action_format
// (the hinted arm differs by its seeds).
func observationHash(req model.Request, sample int) uint64 {
	h := fnv.New64a()
	for _, m := range req.Messages {
		if m.Role == model.RoleAssistant || m.Role == model.RoleSystem {
			continue
		}
		_, _ = io.WriteString(h, m.Content)
	}
	_, _ = io.WriteString(h, strconv.FormatInt(req.Seed, 10)+"/"+strconv.Itoa(sample))
	return h.Sum64()
}

package procedural

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spade-pipeline/spade/engines/model"
)

// Meta keys the pipeline's stages set on model.Request.Meta; this backend
// reads them in place of understanding the prompt text.
const (
	MetaTask     = "spade.task"     // "design", "hint" or "agent"
	MetaKind     = "spade.kind"     // design: reasoning | game | grounded | tooluse
	MetaSkill    = "spade.skill"    // design: one of Skills
	MetaSetting  = "spade.setting"  // design: game | tool_use
	MetaSlot     = "spade.slot"     // design: slot id; its trailing number cycles families
	MetaAttempt  = "spade.attempt"  // design: generation attempt 0..4
	MetaDoc      = "spade.doc"      // design: JSON []Document
	MetaMemory   = "spade.memory"   // design: JSON []MemoryEntry of this skill
	MetaFeedback = "spade.feedback" // design: previous attempt's failure, may be empty
	MetaSource   = "spade.source"   // hint: environment source (else the last user message)
	MetaHint     = "spade.hint"     // agent: hint text, empty when unhinted
	MetaSeed     = "spade.seed"     // agent: play seed (else Request.Seed)
)

// Name is the backend name recorded in tables. The procedural backend is a
// deterministic stand-in for an LLM, not a language model.
const Name = "procedural:v1"

// Backend is the offline procedural model: designer, hint writer and agent
// in one deterministic model.Backend. The zero value is ready to use and
// safe for concurrent use (it holds no state).
type Backend struct{}

// New returns a procedural Backend.
func New() *Backend { return &Backend{} }

// Name implements model.Backend.
func (*Backend) Name() string { return Name }

// Chat implements model.Backend. The same Request always gives the same
// Response, byte for byte. Errors: ctx.Err() wrapped when ctx is done;
// ErrBadRequest wrapped for an unknown spade.task or malformed design Meta.
// Request.N samples (default 1) differ in a seeded way: design sample i
// takes the i-th next family, agent sample i draws its own noise.
func (b *Backend) Chat(ctx context.Context, req model.Request) (model.Response, error) {
	if err := ctx.Err(); err != nil {
		return model.Response{}, fmt.Errorf("procedural chat: %w", err)
	}
	n := max(1, req.N)
	resp := model.Response{Model: Name}
	task := req.Meta[MetaTask]
	switch task {
	case "design":
		spec, err := parseDesignSpec(req.Meta, req.Seed)
		if err != nil {
			return model.Response{}, fmt.Errorf("procedural design: %w", err)
		}
		for i := 0; i < n; i++ {
			d, err := designEnv(spec, i)
			if err != nil {
				return model.Response{}, fmt.Errorf("procedural design slot %q: %w", spec.slot, err)
			}
			resp.Choices = append(resp.Choices, textChoice(d.response))
		}
	case "hint":
		src := req.Meta[MetaSource]
		if src == "" {
			src = lastContent(req.Messages, model.RoleUser)
		}
		h := WriteHint(src)
		for i := 0; i < n; i++ {
			resp.Choices = append(resp.Choices, textChoice(h))
		}
	case "agent":
		seed := req.Seed
		if s := req.Meta[MetaSeed]; s != "" {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return model.Response{}, fmt.Errorf("procedural agent: %w: Meta %s=%q is not an integer", ErrBadRequest, MetaSeed, s)
			}
			seed = v
		}
		hint, ok := req.Meta[MetaHint]
		if !ok {
			hint = hintFromSystem(req.Messages)
		}
		for i := 0; i < n; i++ {
			if err := ctx.Err(); err != nil {
				return model.Response{}, fmt.Errorf("procedural chat: %w", err)
			}
			if len(req.Tools) > 0 {
				resp.Choices = append(resp.Choices, toolAct(req.Messages, req.Tools, hint, seed, i))
			} else {
				resp.Choices = append(resp.Choices, textChoice(textAct(req.Messages, hint, seed, i)))
			}
		}
	default:
		return model.Response{}, fmt.Errorf("procedural chat: %w: Meta %s=%q is not design, hint or agent", ErrBadRequest, MetaTask, task)
	}
	resp.Usage = usage(req, resp)
	return resp, nil
}

func textChoice(s string) model.Choice {
	return model.Choice{Message: model.Message{Role: model.RoleAssistant, Content: s}, FinishReason: "stop"}
}

func lastContent(msgs []model.Message, role string) string {
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == role {
			return msgs[i].Content
		}
	}
	return ""
}

// hintFromSystem reads the "Hint: ..." section of the agent's system prompt,
// for callers that do not set spade.hint.
func hintFromSystem(msgs []model.Message) string {
	for _, m := range msgs {
		if m.Role != model.RoleSystem {
			continue
		}
		for _, line := range strings.Split(m.Content, "\n") {
			t := strings.TrimSpace(line)
			if strings.HasPrefix(strings.ToLower(t), "hint:") {
				return strings.TrimSpace(t[len("hint:"):])
			}
		}
	}
	return ""
}

// usage counts whitespace-separated words as tokens: the backend has no
// tokenizer, and a stable approximation keeps budgets and metrics meaningful.
func usage(req model.Request, resp model.Response) model.Usage {
	var u model.Usage
	for _, m := range req.Messages {
		u.PromptTokens += len(strings.Fields(m.Content))
	}
	for _, c := range resp.Choices {
		u.CompletionTokens += len(strings.Fields(c.Message.Content))
		for _, tc := range c.Message.ToolCalls {
			u.CompletionTokens += 1 + len(strings.Fields(tc.Arguments))
		}
	}
	return u
}

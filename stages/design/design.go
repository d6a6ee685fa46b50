// Package design is the generation stage (docs/method.md step 3): for every slot
// the designer writes an environment; an attempt that fails the sandbox's
// quick checks (compile, reset, probe step) is retried with the failure fed
// back, up to design.max_attempts times. Every attempt is a row of designs;
// every model call a row of design_calls.
package design

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/sourcegraph/conc/pool"

	"github.com/spade-pipeline/spade/engines/draw"
	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/engines/envcheck"
	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/procedural"
	"github.com/spade-pipeline/spade/engines/prompt"
	"github.com/spade-pipeline/spade/engines/sandbox"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// SeedsPerPrompt is n of the memory seed selection (public code: 2).
const SeedsPerPrompt = 2

// Stage is the design stage; it runs on regeneration rounds.
type Stage struct {
	// Eng holds the shared sandbox and model backend (required).
	Eng *engine.Engines
}

// Name implements pipeline.Stage.
func (*Stage) Name() string { return "design" }

// Outputs implements pipeline.Stage.
func (*Stage) Outputs() []pipeline.Output {
	return []pipeline.Output{{Table: "designs"}, {Table: engine.CallsTable("design"), Kind: "llm_calls"}}
}

// Plan implements pipeline.Stage.
// With managed or reload serving of the designer, checkpoints of round
// r-1 is an input too: the policy the designer's server must serve.
func (*Stage) Plan(ri pipeline.RoundInfo, cfg *config.Config) ([]pipeline.Input, bool) {
	if ri.Round < 1 || !ri.Regeneration {
		return nil, false
	}
	ins := []pipeline.Input{
		{Table: "slots", Round: ri.Round},
		{Table: "corpus", Round: 0},
		{Table: "memory", Round: ri.Round - 1, Optional: ri.Round == 1},
	}
	if engine.Served(cfg.Model, config.RoleDesigner) {
		ins = append(ins, engine.CheckpointInput(ri.Round))
	}
	return ins, true
}

// Serve implements pipeline.Serving: the round's policy behind the designer
// role's backend for this stage (engine.Engines.Serve).
func (s *Stage) Serve(ctx context.Context, env *pipeline.Env) (func(), error) {
	return s.Eng.Serve(ctx, env, "design")
}

// ConfigSubset implements pipeline.Stage.
func (*Stage) ConfigSubset(c *config.Config) any {
	return struct {
		Design   config.Design
		Model    config.Model
		Sandbox  config.Sandbox
		NoMemory bool `json:",omitempty"`
	}{c.Design, c.Model, c.Sandbox, c.Ablation.NoMemory}
}

// Parts implements pipeline.Stage.Parts: one part per
// design.slots_per_part slots of the round (at least one), counted from
// the slots manifest without reading it. Its error is always nil.
func (*Stage) Parts(_ context.Context, env *pipeline.Env) (int, error) {
	n := int(env.Manifest("slots", env.Round.Round).Rows)
	per := env.Config.Design.SlotsPerPart
	return max(1, (n+per-1)/per), nil
}

type docRow struct {
	DocID  string `parquet:"doc_id"`
	Title  string `parquet:"title"`
	Domain string `parquet:"domain"`
	Text   string `parquet:"text"`
}

// DocExcerptChars bounds the document text passed to the model per
// document, in characters (Unicode code points, as prompt.Excerpt counts
// them), not bytes: a longer text is cut to at most this many code points
// by prompt.Excerpt, which then appends " [...]".
const DocExcerptChars = 6000

// Run implements pipeline.Stage.Run: it designs the part's slots,
// design.max_attempts attempts at most each. A failed model call, prompt,
// code extraction or quick check is recorded in that attempt's row
// (Design.Error), not returned. Errors returned: reading slots or memory
// (pipeline.ReadAll: the store's error, pipeline.ErrIntegrity,
// table.ErrCorrupt, a schema mismatch); reading the grounding corpus rows
// (wrapped as "read grounding documents"); engine.Engines.ForStage (a
// replay whose recorded calls cannot be read) and Engines.Sandbox
// ("sandbox: ..."); ctx.Err() when ctx is cancelled while slots are being
// designed; and the StageModel's Emit error (replay.ErrMiss or
// model.ErrUnavailable, wrapped), which fails the part so nothing is
// committed.
func (s *Stage) Run(ctx context.Context, env *pipeline.Env, part int, out *pipeline.Out) error {
	ri := env.Round
	slots, err := pipeline.ReadAll(ctx, env, schemas.Slots, "slots", ri.Round)
	if err != nil {
		return err
	}
	per := env.Config.Design.SlotsPerPart
	slots = slots[min(len(slots), part*per):min(len(slots), (part+1)*per)]
	mem, err := pipeline.ReadAll(ctx, env, schemas.Memory, "memory", ri.Round-1)
	if err != nil {
		return err
	}
	if env.Config.Ablation.NoMemory {
		// The no-memory ablation (public code NO_ENV_MEMORY=1): prompts
		// carry no seeds; the memory table is still kept.
		mem = nil
	}
	var rows []int64
	for _, sl := range slots {
		rows = append(rows, sl.DocRows...)
	}
	docs, err := pipeline.ReadRowsAt[docRow](ctx, env.Store(), env.Manifest("corpus", 0), rows)
	if err != nil {
		return fmt.Errorf("read grounding documents: %w", err)
	}
	rec, err := s.Eng.ForStage(ctx, "design", ri.Round)
	if err != nil {
		return err
	}
	sb, err := s.Eng.Sandbox()
	if err != nil {
		return err
	}
	results := make([][]schemas.Design, len(slots))
	// Each slot's attempts are one task in flight (an attempt's prompt
	// depends on the last one's outcome): model.concurrency slots at once
	// over every part this process runs, their quick checks workers at a
	// time (engine.Engines.CPU).
	tasks, cpu := s.Eng.Tasks(), s.Eng.CPU()
	wp := pool.New().WithContext(ctx)
	off := 0
	for i, sl := range slots {
		d := docs[off : off+len(sl.DocRows)]
		off += len(sl.DocRows)
		wp.Go(func(ctx context.Context) error {
			if err := tasks.Acquire(ctx, engine.Key{Part: part, Seq: i}); err != nil {
				return err
			}
			defer tasks.Release()
			results[i] = generate(ctx, env.Config, rec, sb, cpu, sl, d, mem)
			return ctx.Err()
		})
	}
	if err := wp.Wait(); err != nil {
		return err
	}
	for _, r := range results {
		for i := range r {
			r[i].CheckpointID = rec.CheckpointID
		}
		pipeline.Emit(out, schemas.Designs, "designs", r...)
	}
	return rec.Emit(ctx, out, env.Config)
}

// PartsInFlight implements pipeline.PartsInFlight: enough parts that
// their slots fill model.concurrency with a part to spare
// (engine.Engines.PartsInFlight).
func (s *Stage) PartsInFlight(c *config.Config) int {
	return s.Eng.PartsInFlight(c.Design.SlotsPerPart)
}

// generate runs the attempts of one slot; its quick checks take a place
// of cpu each.
func generate(ctx context.Context, cfg *config.Config, backend model.Backend, sb *sandbox.Sandbox, cpu *engine.Limiter, sl schemas.Slot, docs []docRow, mem []schemas.MemoryEntry) []schemas.Design {
	rng := rand.New(rand.NewPCG(uint64(sl.Seed), 7))
	seeds, negs := draw.Seeds(mem, sl.Skill, SeedsPerPrompt, rng)
	// The slot's setting ("game", "tool_use") is already the template's
	// kind; the prompt's Setting section is the theme: the grounding
	// documents' domains.
	in := prompt.Input{Kind: sl.Kind, Skill: sl.Skill, Setting: theme(docs)}
	var pdocs []procedural.Document
	for _, d := range docs {
		text := prompt.Excerpt(d.Text, DocExcerptChars)
		in.Docs = append(in.Docs, prompt.Doc{ID: d.DocID, Title: d.Title, Text: text})
		pdocs = append(pdocs, procedural.Document{DocID: d.DocID, Title: d.Title, Domain: d.Domain, Text: text})
	}
	var pmem []procedural.MemoryEntry
	for _, e := range append(append([]schemas.MemoryEntry(nil), seeds...), negs...) {
		pmem = append(pmem, procedural.MemoryEntry{EnvID: e.EnvID, Family: e.Family, Skill: e.Skill, Difficulty: int(e.Difficulty), WinRate: e.WinRate, Regret: e.Regret})
	}
	for _, e := range mem {
		if e.Skill == sl.Skill {
			found := false
			for _, p := range pmem {
				found = found || p.EnvID == e.EnvID
			}
			if !found {
				pmem = append(pmem, procedural.MemoryEntry{EnvID: e.EnvID, Family: e.Family, Skill: e.Skill, Difficulty: int(e.Difficulty), WinRate: e.WinRate, Regret: e.Regret})
			}
		}
	}
	toSeed := func(e schemas.MemoryEntry) prompt.Seed {
		return prompt.Seed{Name: e.Family, Skill: e.Skill, Description: e.Summary, WinRate: e.WinRate, Regret: e.Regret, Source: e.Excerpt}
	}
	for _, e := range seeds {
		in.Seeds = append(in.Seeds, toSeed(e))
	}
	for _, e := range negs {
		in.Negatives = append(in.Negatives, toSeed(e))
	}
	var out []schemas.Design
	for attempt := 0; attempt < cfg.Design.MaxAttempts; attempt++ {
		d := schemas.Design{SlotID: sl.SlotID, Attempt: int64(attempt), Skill: sl.Skill, Setting: sl.Setting, Kind: sl.Kind, Model: backend.Name()}
		msgs, err := prompt.Render(sl.Kind, in)
		if err != nil {
			d.Error = "prompt: " + err.Error()
			out = append(out, d)
			break
		}
		pj, _ := json.Marshal(msgs)
		d.Prompt = string(pj)
		req := model.Request{
			Messages: msgs, N: 1, Temperature: cfg.Design.Temperature, TopP: cfg.Design.TopP, MaxTokens: cfg.Design.MaxTokens,
			Seed: pipeline.DeriveSeed(sl.Seed, "design", attempt),
			Meta: map[string]string{
				procedural.MetaTask: "design", procedural.MetaKind: sl.Kind, procedural.MetaSkill: sl.Skill,
				procedural.MetaSetting: sl.Setting, procedural.MetaSlot: sl.SlotID, procedural.MetaAttempt: strconv.Itoa(attempt),
				procedural.MetaDoc: engine.MetaJSON(pdocs), procedural.MetaMemory: engine.MetaJSON(pmem), procedural.MetaFeedback: in.Feedback,
			},
		}
		resp, err := backend.Chat(ctx, req)
		if err != nil {
			d.Error = "model: " + err.Error()
			in.Feedback = ""
			out = append(out, d)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		ch := resp.Choices[0]
		d.Response, d.FinishReason = ch.Message.Content, ch.FinishReason
		d.PromptTokens, d.CompletionTokens = int64(resp.Usage.PromptTokens), int64(resp.Usage.CompletionTokens)
		if t := ch.Tokens; t != nil {
			d.PromptTokenIDs, d.CompletionTokenIDs, d.CompletionLogprobs = t.PromptIDs, t.CompletionIDs, t.Logprobs
		}
		var answer string
		d.Reasoning, answer = model.ReplyParts(ch.Message)
		if ch.FinishReason == model.FinishLength {
			// A cut answer holds at best part of a program; the retry says
			// so (a "no code block" feedback sent the model after the
			// wrong problem) and names the setting that cut it.
			d.Error = fmt.Sprintf("model: answer cut at design.max_tokens (%d tokens; finish_reason length)", cfg.Design.MaxTokens)
			in.Feedback, in.PreviousSource = fmt.Sprintf("Your answer was cut off at the token limit (design.max_tokens = %d) before it was complete. Write a shorter environment, with less explanation and reasoning, in exactly one ```python block.", cfg.Design.MaxTokens), ""
			out = append(out, d)
			continue
		}
		code, err := prompt.ExtractCode(answer)
		if err != nil {
			d.Error = "extract: " + err.Error()
			in.Feedback, in.PreviousSource = "Your answer contained no Python code block: "+err.Error()+". Answer with exactly one ```python block.", ""
			out = append(out, d)
			continue
		}
		d.Source = prompt.NormalizeSource(code)
		d.EnvID = prompt.EnvID(code)
		if err := cpu.Acquire(ctx, engine.Key{Seq: attempt}); err != nil {
			d.Error = "quick check: " + err.Error()
			out = append(out, d)
			break
		}
		rep := envcheck.QuickCheck(ctx, sb, d.Source, envcheck.Options{})
		cpu.Release()
		if !rep.Valid {
			d.Error = "quick check " + rep.Reason + ": " + failDetail(rep)
			in.Feedback, in.PreviousSource = "The environment failed the check "+rep.Reason+": "+failDetail(rep), d.Source
			out = append(out, d)
			continue
		}
		out = append(out, d)
		break
	}
	if len(out) > 0 {
		out[len(out)-1].Final = true
	}
	return out
}

// theme is the Setting section of a slot's designer prompt: "Theme: "
// and the distinct domains of its grounding documents (corpus.domain) in
// order, or "" when none has a domain (the section is then left out).
func theme(docs []docRow) string {
	var ds []string
	seen := map[string]bool{}
	for _, d := range docs {
		dom := strings.Join(strings.Fields(d.Domain), " ")
		if dom != "" && !seen[strings.ToLower(dom)] {
			seen[strings.ToLower(dom)] = true
			ds = append(ds, dom)
		}
	}
	if len(ds) == 0 {
		return ""
	}
	return "Theme: " + strings.Join(ds, ", ") + ". Set the environment in this field."
}

// failDetail is the detail and traceback of the check that failed rep,
// or of the check its time limit cut short (envcheck.ReasonTimeout).
func failDetail(rep envcheck.Report) string {
	name := rep.Reason
	if rep.Reason == envcheck.ReasonTimeout {
		name = rep.Stopped
	}
	for _, c := range rep.Checks {
		if c.Name == name {
			s := c.Detail
			if c.TracebackTail != "" {
				s += "\n" + c.TracebackTail
			}
			return strings.TrimSpace(s)
		}
	}
	return ""
}

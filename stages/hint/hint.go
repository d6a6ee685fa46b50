// Package hint is the hint stage (docs/method.md step 5): one designer-side call
// per valid environment, conditioned on its source (the agent never sees
// the source), giving the privileged hint of the hinted plays.
package hint

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sourcegraph/conc/pool"

	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/procedural"
	"github.com/spade-pipeline/spade/engines/prompt"
	"github.com/spade-pipeline/spade/internal/textcut"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// MaxHintBytes bounds a stored hint, in bytes: a longer (trimmed) model
// answer is cut to its longest prefix of at most this many bytes that does
// not end inside a UTF-8 character (textcut.Prefix). Hint.Response keeps
// the whole answer.
const MaxHintBytes = 4000

// Stage is the hint stage; it runs on regeneration rounds.
type Stage struct {
	// Eng provides the shared model backend (required).
	Eng *engine.Engines
}

// Name implements pipeline.Stage.
func (*Stage) Name() string { return "hint" }

// Outputs implements pipeline.Stage.
func (*Stage) Outputs() []pipeline.Output {
	return []pipeline.Output{{Table: "hints"}, {Table: engine.CallsTable("hint"), Kind: "llm_calls"}}
}

// Plan implements pipeline.Stage.
// With managed or reload serving of the hint role, checkpoints of round
// r-1 is an input too.
func (*Stage) Plan(ri pipeline.RoundInfo, cfg *config.Config) ([]pipeline.Input, bool) {
	ins := []pipeline.Input{{Table: "environments", Round: ri.Round}}
	if engine.Served(cfg.Model, config.RoleHint) && ri.Round >= 1 {
		ins = append(ins, engine.CheckpointInput(ri.Round))
	}
	return ins, ri.Round >= 1 && ri.Regeneration
}

// Serve implements pipeline.Serving: the round's policy behind the hint
// role's backend for this stage (engine.Engines.Serve).
func (s *Stage) Serve(ctx context.Context, env *pipeline.Env) (func(), error) {
	return s.Eng.Serve(ctx, env, "hint")
}

// ConfigSubset implements pipeline.Stage.
func (*Stage) ConfigSubset(c *config.Config) any {
	return struct {
		Model config.Model
		Hint  config.Hint
	}{c.Model, c.Hint}
}

// Parts implements pipeline.Stage.Parts: the stage is one part, and its
// error is always nil.
func (*Stage) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }

// Run implements pipeline.Stage.Run: one hint call per valid environment.
// A failed prompt or model call is recorded in that environment's hints
// row (Hint.Error), not returned. Errors returned: reading environments
// (pipeline.ReadAll: the store's error, pipeline.ErrIntegrity,
// table.ErrCorrupt, a schema mismatch); engine.Engines.ForStage's;
// ctx.Err() when ctx is cancelled during the calls; and the StageModel's
// Emit error (replay.ErrMiss or model.ErrUnavailable, wrapped), which
// fails the stage so nothing is committed.
func (s *Stage) Run(ctx context.Context, env *pipeline.Env, _ int, out *pipeline.Out) error {
	envs, err := pipeline.ReadAll(ctx, env, schemas.Environments, "environments", env.Round.Round)
	if err != nil {
		return err
	}
	rec, err := s.Eng.ForStage(ctx, "hint", env.Round.Round)
	if err != nil {
		return err
	}
	rows := make([]*schemas.Hint, len(envs))
	// model.concurrency calls in flight, counted with every other task
	// this process has in flight (engine.Engines.Tasks).
	tasks := s.Eng.Tasks()
	wp := pool.New().WithContext(ctx)
	for i, e := range envs {
		if !e.Valid {
			continue
		}
		wp.Go(func(ctx context.Context) error {
			if err := tasks.Acquire(ctx, engine.Key{Seq: i}); err != nil {
				return err
			}
			defer tasks.Release()
			rows[i] = write(ctx, env, rec, e)
			return ctx.Err()
		})
	}
	if err := wp.Wait(); err != nil {
		return err
	}
	for _, h := range rows {
		if h != nil {
			h.CheckpointID = rec.CheckpointID
			pipeline.Emit(out, schemas.Hints, "hints", *h)
		}
	}
	return rec.Emit(ctx, out, env.Config)
}

func write(ctx context.Context, env *pipeline.Env, backend model.Backend, e schemas.Environment) *schemas.Hint {
	h := &schemas.Hint{EnvID: e.EnvID, Model: backend.Name()}
	msgs, err := prompt.RenderHint(e.Source, e.Kind, e.Skill)
	if err != nil {
		h.Error = "prompt: " + err.Error()
		return h
	}
	pj, _ := json.Marshal(msgs)
	h.Prompt = string(pj)
	samp := env.Config.Hint.Sampling()
	resp, err := backend.Chat(ctx, model.Request{
		Messages: msgs, N: 1, Temperature: samp.Temperature, TopP: samp.TopP, MaxTokens: samp.MaxTokens,
		Seed: pipeline.DeriveSeed(env.Round.Seed, "hint", env.Round.Round, e.EnvID),
		Meta: map[string]string{procedural.MetaTask: "hint", procedural.MetaSource: e.Source},
	})
	if err != nil {
		h.Error = "model: " + err.Error()
		return h
	}
	ch := resp.Choices[0]
	h.Response, h.FinishReason = ch.Message.Content, ch.FinishReason
	h.Reasoning, h.Hint = model.ReplyParts(ch.Message)
	if ch.FinishReason == model.FinishLength {
		// Half a hint (or a hint still thinking) is not a hint: the
		// environment gets no hinted arm, as for a failed call.
		h.Hint = ""
		h.Error = fmt.Sprintf("model: cut at hint.max_tokens (%d; finish_reason length)", samp.MaxTokens)
		return h
	}
	if h.Hint == "" {
		// The call answered, but with no hint (content null or blank, a
		// reasoning model out of tokens): the rollout stage plays no
		// hinted arm, and the row says why.
		h.Error = fmt.Sprintf("model: empty answer (finish_reason %q)", resp.Choices[0].FinishReason)
		return h
	}
	if len(h.Hint) > MaxHintBytes {
		h.Hint = textcut.Prefix(h.Hint, MaxHintBytes)
	}
	return h
}

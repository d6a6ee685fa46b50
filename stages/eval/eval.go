// Package eval is the eval stage: every eval.every rounds it serves
// checkpoint(r) and scores it on the held-out suites through
// engines/evaluate, writing the evals table (docs/recipes.md "Evaluation").
package eval

import (
	"context"
	"fmt"

	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/engines/evaluate"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// StageName is the eval stage's name in manifests and on the CLI.
const StageName = "eval"

// Stage is the eval stage: in round r with eval.every > 0 and r %
// eval.every == 0 it serves checkpoint(r) (the weights round r's GRPO
// step wrote; with grpo.trainer none the base carried forward) and writes
// its scores to the evals table. It does not run under model.replay (its
// requests are not recorded calls: a replayed run has no evals table).
type Stage struct {
	// Eng serves the checkpoint (engine.ServeCheckpoint); required.
	Eng *engine.Engines
}

// Name implements pipeline.Stage.
func (*Stage) Name() string { return StageName }

// Outputs implements pipeline.Stage: the evals table.
func (*Stage) Outputs() []pipeline.Output { return []pipeline.Output{{Table: "evals"}} }

// Plan implements pipeline.Stage: checkpoints(r), in the rounds
// eval.every names (config.Eval.RunsAt), never under model.replay.
func (*Stage) Plan(ri pipeline.RoundInfo, cfg *config.Config) ([]pipeline.Input, bool) {
	if !cfg.Eval.RunsAt(ri.Round) || cfg.Model.Replay != "" {
		return nil, false
	}
	return []pipeline.Input{{Table: "checkpoints", Round: ri.Round}}, true
}

// ConfigSubset implements pipeline.Stage: evaluate.Settings. The weights
// served are identified by the checkpoints input.
func (*Stage) ConfigSubset(c *config.Config) any { return evaluate.Settings(c.Eval, c.Model) }

// Parts implements pipeline.Stage: one part (one server, one evaluator
// run); its error is always nil.
func (*Stage) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }

// Run implements pipeline.Stage.Run: read the one checkpoints row of
// round r, serve it, score it (evaluate.Score) and emit one evals row per score.
// Errors: the input's, ServeCheckpoint's and evaluate.Score's; nothing is
// committed then, and the round's eval stage can be run again.
func (s *Stage) Run(ctx context.Context, env *pipeline.Env, _ int, out *pipeline.Out) error {
	r := env.Round.Round
	rows, err := pipeline.ReadAll(ctx, env, schemas.Checkpoints, "checkpoints", r)
	if err != nil {
		return err
	}
	if len(rows) != 1 {
		return fmt.Errorf("checkpoints of round %d has %d rows, want 1", r, len(rows))
	}
	evals, err := evaluate.ServeAndScore(ctx, s.Eng, env.Store(), rows[0], engine.ServeTag{Run: env.Round.Run, Round: r, Stage: StageName}, r)
	if err != nil {
		return err
	}
	pipeline.Emit(out, schemas.Evals, "evals", evals...)
	out.Stat("evals", len(evals))
	return nil
}

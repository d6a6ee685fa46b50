package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/engines/evaluate"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
)

// checks selects the pre-run checks a command runs (preflight). Each
// command names those that apply to the work it starts.
type checks uint8

const (
	// checkConfig is engine.CheckConfig: settings the configured model
	// cannot serve, a bad model.replay name, too many workers as root.
	checkConfig checks = 1 << iota
	// checkTrainer is engine.CheckTrainer: the base checkpoint and the
	// torch trainer's interpreter, when a trainer runs or a role is
	// served from checkpoints.
	checkTrainer
	// checkEval is evaluate.Check, when eval.every > 0: the eval suites'
	// task and prompt names and the lm_eval task directory.
	checkEval
	// checkReplay is engine.CheckReplay: the model.replay run exists.
	checkReplay
)

// preflight runs, in this order, the checks of which on cfg before a
// command starts work, so that a setting that would fail a stage fails
// in seconds instead, before anything is committed. store is read by
// checkReplay only (nil is fine without it). Errors, ready to return
// from a command: a usageError (exit code 2) for a configuration
// error, CheckReplay's ErrNotCommitted (the replay run does not exist)
// included; CheckReplay's other errors (the store cannot be read, a
// damaged run file) as they are. The evaluator's error is prefixed
// "invalid configuration: ".
func preflight(ctx context.Context, cfg *config.Config, store storage.Store, log *slog.Logger, which checks) error {
	if which&checkConfig != 0 {
		if err := engine.CheckConfig(cfg); err != nil {
			return usageError{err}
		}
	}
	if which&checkTrainer != 0 {
		if err := engine.CheckTrainer(ctx, cfg); err != nil {
			return usageError{err}
		}
	}
	if which&checkEval != 0 && cfg.Eval.Every != 0 {
		// A misspelt task would otherwise fail at the round's end, after
		// every model call, with the eval settings already pinned.
		if err := evaluate.Check(ctx, cfg.Eval, log); err != nil {
			return usageError{fmt.Errorf("invalid configuration: %w", err)}
		}
	}
	if which&checkReplay != 0 {
		if err := engine.CheckReplay(ctx, store, cfg); err != nil {
			if errors.Is(err, pipeline.ErrNotCommitted) {
				return usageError{err}
			}
			return err
		}
	}
	return nil
}

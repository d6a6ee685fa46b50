package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/engines/evaluate"
	"github.com/spade-pipeline/spade/internal/termtext"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/table"
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/stages/eval"
)

func init() {
	extraCommands = append(extraCommands, newEvalCmd)
}

// newEvalCmd implements `spade eval --round R [--force]`: score
// checkpoint(R) of the run on this invocation's eval suites and keep the
// rows beside the rounds (evaluate.SideKey), where the report and DuckDB
// find them.
func newEvalCmd(g *globals) *cobra.Command {
	var round int
	var force bool
	cmd := &cobra.Command{
		Use:   "eval --round R [--force]",
		Short: "Serve checkpoint(R) and score it on the configured held-out suites (reasoning-gym, lm-evaluation-harness)",
		Long: `Serve the checkpoint that round R trained (round 0: grpo.base_checkpoint)
with the agent role's serving settings (model.serving managed, reload or
fixed) and score it on eval.reasoning_gym and eval.lm_eval of this
invocation's config, through trainer/spade_trainer/evaluate.py run by
eval.python. The scores (the evals table's columns) are written to
<run>/evals/round=NNNNNN/evals-<digest>.parquet in the store: outside the
sealed rounds, so a finished run can be evaluated later and on other
suites; the digest names the checkpoint, the eval settings and the
content of eval.lm_eval.include_path, and a second call with the same
ones does nothing unless --force. spade report
plots them beside the eval stage's evals tables. Exit 2 when no suite is
configured or the agent role is not an openai backend; exit 1 when a
suite setting is wrong (checked before any server starts), the round has
no checkpoint yet, the server does not come up, every request fails, or
some fail and the server no longer answers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("round") {
				return usagef("--round is required")
			}
			if round < 0 {
				return usagef("--round %d: want a round >= 0", round)
			}
			ctx := cmd.Context()
			a, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			if !a.cfg.Eval.HasSuite() {
				return usagef("no evaluation suite configured: set eval.reasoning_gym.tasks or eval.lm_eval.tasks in %s (docs/config.md)", g.configPath)
			}
			if b := a.cfg.Model.ForRole(config.RoleAgent).Backend; b != config.BackendOpenAI {
				return usagef("the agent role's backend is %s: spade eval serves the checkpoint over the OpenAI API, so set model.backend (or model.roles.agent.backend) to openai with a serving mode (docs/serving.md)", b)
			}
			rf, err := pipeline.ReadRunFile(ctx, a.store, g.runName)
			if err != nil {
				return err
			}
			ck := schemas.Checkpoint{CheckpointID: "base:" + rf.Config.GRPO.BaseCheckpoint, Trainer: "base"}
			if round > 0 {
				m, err := pipeline.ReadManifest(ctx, a.store, pipeline.ManifestKey(g.runName, round, "checkpoints"))
				if errors.Is(err, storage.ErrNotFound) {
					return fmt.Errorf("run %s round %d has no checkpoints table yet (its grpo stage has not committed): %w", g.runName, round, pipeline.ErrNotCommitted)
				}
				if err != nil {
					return err
				}
				rows, err := pipeline.ReadManifestRows(ctx, a.store, schemas.Checkpoints, m)
				if err != nil {
					return err
				}
				if len(rows) != 1 {
					return fmt.Errorf("checkpoints of round %d has %d rows, want 1", round, len(rows))
				}
				ck = rows[0]
			}
			cfg := a.cfg
			if ck.Trainer == "base" {
				// The run's base, not this config's: round 0 (and every
				// round of a run without a trainer) serves what the run
				// started from.
				cfg.GRPO.BaseCheckpoint = rf.Config.GRPO.BaseCheckpoint
			}
			digest, err := evaluate.SideDigest(&cfg, ck.CheckpointID)
			if err != nil {
				return err
			}
			key := evaluate.SideKey(g.runName, round, digest)
			if data, err := storage.ReadAll(ctx, a.store, key); err == nil && !force {
				_, _, derr := table.Decode(schemas.Evals, key, data)
				if derr == nil {
					note := ""
					if rec, rerr := pipeline.ReadSideRecord(ctx, a.store, key); rerr == nil && rec == nil {
						note = "; it has no side record, so spade verify cannot check its digest: --force writes it again with one"
					}
					fmt.Printf("round %d (%s) already evaluated with these settings: %s (--force scores it again%s)\n", round, termtext.Safe(ck.CheckpointID), termtext.Safe(key), note)
					return nil
				}
				a.log.Warn("eval: the earlier evaluation file is damaged; scoring again", "key", key, "error", derr)
			} else if err != nil && !errors.Is(err, storage.ErrNotFound) {
				return err
			}
			// Registered as a writer of the run (and of the run whose
			// files the checkpoint is, for a fork's inherited round) from
			// before the checkpoint's files are read until its scores are
			// written: spade gc leaves the run alone meanwhile (its
			// retention rules would remove those files), exit 4 with --run,
			// as for spade round (docs/format.md "Writers and gc").
			release, err := registerEval(ctx, a, g.runName, ck)
			if err != nil {
				return err
			}
			defer release()
			eng := &engine.Engines{Config: &cfg, Store: a.store, Log: a.log}
			defer eng.Close()
			rows, err := evaluate.ServeAndScore(ctx, eng, a.store, ck, engine.ServeTag{Run: g.runName, Round: round, Stage: eval.StageName}, round)
			if err != nil {
				return err
			}
			withConfig := ""
			if g.configPath != "" {
				withConfig = " --config " + g.configPath
			}
			repair := fmt.Sprintf("spade --run %s%s eval --round %d --force (with the settings and build that wrote it)", g.runName, withConfig, round)
			if _, err := evaluate.WriteSide(ctx, a.store, g.runName, round, digest, rows, repair); err != nil {
				return err
			}
			tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SUITE\tTASK\tMETRIC\tVALUE\tSTDERR\tN")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%.4g\t%.3g\t%d\n", termtext.Safe(r.Suite), termtext.Safe(r.Task), termtext.Safe(r.Metric), r.Value, r.Stderr, r.N)
			}
			tw.Flush()
			fmt.Printf("round %d (%s): %d scores written to %s\n", round, termtext.Safe(ck.CheckpointID), len(rows), termtext.Safe(key))
			return nil
		},
	}
	cmd.Flags().IntVar(&round, "round", 0, "the round whose checkpoint to score (0: the base checkpoint)")
	cmd.Flags().BoolVar(&force, "force", false, "score again even when this checkpoint was scored with these settings")
	return cmd
}

// registerEval registers spade eval as a writer of run, and of every
// other run whose store keys ck's files lie under (a fork's round
// inherited from its source), waiting while a spade gc holds one
// (pipeline.RegisterWriter). The returned func releases them all.
func registerEval(ctx context.Context, a *app, run string, ck schemas.Checkpoint) (func(), error) {
	runs := []string{run}
	for _, f := range ck.Files {
		if owner, _, ok := strings.Cut(f.Key, "/"); ok && !slices.Contains(runs, owner) {
			runs = append(runs, owner)
		}
	}
	var held []*pipeline.HeldLease
	release := func() {
		for _, l := range held {
			l.Release()
		}
	}
	for _, r := range runs {
		l, err := pipeline.RegisterWriter(ctx, a.store, r, a.log)
		if err != nil {
			release()
			return nil, err
		}
		held = append(held, l)
	}
	return release, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/spade-pipeline/spade/docs"
	"github.com/spade-pipeline/spade/engines/evaluate"
	"github.com/spade-pipeline/spade/engines/report"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/stages/grpo"
	"github.com/spade-pipeline/spade/stages/roundmetrics"
)

func init() {
	extraCommands = append(extraCommands, newReportCmd)
}

func newReportCmd(g *globals) *cobra.Command {
	var outPath string
	cmd := &cobra.Command{
		Use:   "report [--out FILE]",
		Short: "Write one offline HTML report of the run: plots over rounds of the round metrics, the agent's replies and the training dynamics",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			a, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			// The run's own config, not this invocation's: the report
			// describes the run as it was made (its k, its band).
			rf, err := pipeline.ReadRunFile(ctx, a.store, g.runName)
			if err != nil {
				return err
			}
			if err := rf.VerifyConfig(); err != nil {
				return err
			}
			cfg := rf.Config
			runBand := report.Band{Low: cfg.Label.BandLow, High: cfg.Label.BandHigh}
			origin := roundOrigin(ctx, a.store, rf)
			side, damaged, err := evaluate.ReadSide(ctx, a.store, g.runName)
			if err != nil {
				return err
			}
			for _, d := range damaged {
				a.log.Warn("report: an evaluation file outside the rounds is damaged and left out", "error", d)
			}
			var rounds []report.RoundSummary
			sameK := true // every round shown made with the run's k (reportHeader drops k under fixed_pool)
			for r := 1; ; r++ {
				m, err := pipeline.ReadManifest(ctx, a.store, pipeline.ManifestKey(g.runName, r, "metrics"))
				if errors.Is(err, storage.ErrNotFound) {
					break
				}
				if err != nil {
					return err
				}
				rows, err := pipeline.ReadManifestRows(ctx, a.store, schemas.Metrics, m)
				if err != nil {
					return err
				}
				// A fork's rounds up to its fork round were computed by its
				// source run, with the source's k and band.
				from, err := origin(r)
				if err != nil {
					return err
				}
				sum := roundmetrics.Summary(r, pipeline.NewRoundInfo(from.Run, r, &from.Config).Regeneration, rows)
				sameK = sameK && !from.Config.FixedPool() && from.Config.RegenerateEvery == cfg.RegenerateEvery
				if sum.Training, sum.Replies, err = roundTables(ctx, a.store, g.runName, r); err != nil {
					return err
				}
				if b := (report.Band{Low: from.Config.Label.BandLow, High: from.Config.Label.BandHigh}); b != runBand {
					sum.Band = &b
				}
				evals, err := evaluate.RoundEvals(ctx, a.store, g.runName, r, side)
				if err != nil {
					return err
				}
				sum.Evals = evaluate.Scores(evals)
				rounds = append(rounds, sum)
			}
			if len(rounds) == 0 {
				return fmt.Errorf("run %s has no round with metrics yet: %w", g.runName, pipeline.ErrNotCommitted)
			}
			if outPath == "" {
				outPath = g.runName + "-report.html"
			}
			h := reportHeader(rf, runBand)
			if !sameK {
				h.RegenerateEvery = 0
			}
			base, err := evaluate.RoundEvals(ctx, a.store, g.runName, 0, side) // spade eval --round 0: no round table, side files by RoundEvals' rule
			if err != nil {
				return err
			}
			h.BaseEvals = evaluate.Scores(base)
			f, err := os.Create(outPath)
			if err != nil {
				return err
			}
			if err := report.Render(f, h, rounds); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			abs, _ := filepath.Abs(outPath)
			noun := "rounds"
			if len(rounds) == 1 {
				noun = "round"
			}
			fmt.Printf("wrote %s (%d %s)\n", abs, len(rounds), noun)
			return nil
		},
	}
	cmd.Flags().StringVar(&outPath, "out", "", "output file (default RUN-report.html)")
	return cmd
}

// reportHeader describes the run at the top of its report, from its
// pinned config: the model that answers its calls, its trainer, its config
// digest, k (0 under design.mode fixed_pool, which never regenerates),
// whether it plays a fixed pool, and its recipe (configs/<recipe>.yaml). The serving mode is left
// empty ("not in this run's config") while the config has no such
// setting; the serving issue fills it here.
func reportHeader(rf *pipeline.RunFile, band report.Band) report.Header {
	cfg := rf.Config
	h := report.Header{
		Run: rf.Run, Band: band, ConfigDigest: rf.ConfigDigest,
		RegenerateEvery: cfg.RegenerateEvery, FixedPool: cfg.FixedPool(), MetricsDoc: docs.Metrics,
	}
	if h.FixedPool {
		h.RegenerateEvery = 0 // no round regenerates, whatever k says
	}
	if cfg.Recipe != "" {
		h.Recipe = cfg.Recipe + " (configs/" + cfg.Recipe + ".yaml, docs/recipes.md)"
	}
	// One description when every role is answered alike, else one per
	// role (model.roles).
	var roles, modes, served []string
	for _, role := range config.RoleNames {
		m := cfg.Model.ForRole(role)
		roles = append(roles, modelText(m))
		if m.Backend == config.BackendOpenAI {
			sv := m.Serving
			if sv == "" {
				sv = config.ServingFixed
			}
			modes, served = append(modes, sv), append(served, role+": "+sv)
		}
	}
	alike := func(xs []string) bool { return len(slices.Compact(slices.Clone(xs))) == 1 }
	if alike(roles) {
		h.Model = roles[0]
	} else {
		parts := make([]string, len(roles))
		for i, r := range roles {
			if strings.HasPrefix(r, config.BackendProcedural) {
				r = config.BackendProcedural
			}
			parts[i] = config.RoleNames[i] + ": " + r
		}
		h.Model = strings.Join(parts, "; ")
	}
	if cfg.Model.Replay != "" {
		h.Model += fmt.Sprintf(", replaying the llm_calls of run %s", cfg.Model.Replay)
	}
	switch {
	case len(modes) == 0:
		h.Serving = "none (no served model)"
	case len(modes) == len(roles) && alike(modes):
		h.Serving = modes[0]
	default:
		h.Serving = strings.Join(served, "; ")
	}
	h.Trains = cfg.GRPO.Trainer != config.TrainerNone
	switch t := cfg.GRPO; t.Trainer {
	case config.TrainerNone:
		h.Trainer = "none (train_batch written, no checkpoint trained: every round's policy is the base, " + t.BaseCheckpoint + ")"
	case config.TrainerTorch:
		h.Trainer = "torch (the project's PyTorch GRPO step) from " + t.BaseCheckpoint
	case config.TrainerCommand:
		h.Trainer = fmt.Sprintf("command %q from %s", t.Command, t.BaseCheckpoint)
	default:
		h.Trainer = t.Trainer
	}
	return h
}

// roundTables reads what the report shows of round r besides its metrics
// table: the training summary of its train_metrics table
// (grpo.TrainSummary) and the reply summary of its rollouts table
// (roundmetrics.ReplyStats, read one file at a time). A table the round
// does not have gives nil (shown as "no data"). Errors: reading or
// verifying a manifest or a data file (pipeline.ErrIntegrity, a schema
// mismatch).
func roundTables(ctx context.Context, st storage.Store, run string, r int) (*report.Training, *report.Replies, error) {
	var train *report.Training
	m, err := pipeline.ReadManifest(ctx, st, pipeline.ManifestKey(run, r, "train_metrics"))
	switch {
	case err == nil:
		rows, err := pipeline.ReadManifestRows(ctx, st, schemas.TrainMetrics, m)
		if err != nil {
			return nil, nil, err
		}
		train = grpo.TrainSummary(rows)
	case !errors.Is(err, storage.ErrNotFound):
		return nil, nil, err
	}
	m, err = pipeline.ReadManifest(ctx, st, pipeline.ManifestKey(run, r, "rollouts"))
	if errors.Is(err, storage.ErrNotFound) {
		return train, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var stats roundmetrics.ReplyStats
	err = pipeline.ScanManifestRows(ctx, st, schemas.Rollouts, m, func(rows []schemas.Rollout) error {
		stats.Add(rows)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return train, stats.Summary(), nil
}

// roundOrigin returns a function giving, for a round of the run rf
// describes, the run file of the run that computed it: rf itself, or for
// a fork's rounds up to its fork round, its source's (recursively, through
// forks of forks). Run files are read once each. Errors: reading a source
// run's file, or its config not matching its config_digest (wrapping
// pipeline.ErrIntegrity), named with the fork that refers to it.
func roundOrigin(ctx context.Context, st storage.Store, rf *pipeline.RunFile) func(round int) (*pipeline.RunFile, error) {
	cache := map[string]*pipeline.RunFile{rf.Run: rf}
	return func(round int) (*pipeline.RunFile, error) {
		cur := rf
		for seen := 0; cur.ForkOf != "" && round <= cur.ForkRound; seen++ {
			if seen > 64 {
				return nil, fmt.Errorf("run %s: fork chain longer than 64 runs (a cycle?)", rf.Run)
			}
			src, ok := cache[cur.ForkOf]
			if !ok {
				var err error
				if src, err = pipeline.ReadRunFile(ctx, st, cur.ForkOf); err == nil {
					err = src.VerifyConfig() // its config describes these rounds
				}
				if err != nil {
					return nil, fmt.Errorf("round %d of run %s was made by run %s (fork_of): %w", round, cur.Run, cur.ForkOf, err)
				}
				cache[cur.ForkOf] = src
			}
			cur = src
		}
		return cur, nil
	}
}

// modelText describes what answers one role's calls (config.Model.ForRole)
// for the report's header: the procedural stand-in, or the OpenAI-compatible
// model with where it comes from (a fixed server's address, or the
// checkpoints spade serves itself).
func modelText(m config.Model) string {
	switch m.Backend {
	case config.BackendProcedural:
		return "procedural (offline stand-in for an LLM, no weights: docs/procedural.md)"
	case config.BackendOpenAI:
		switch m.Serving {
		case config.ServingManaged:
			return "openai: each round's checkpoint, served by model.serve_command"
		case config.ServingReload:
			return "openai: each round's checkpoint, loaded into the server at " + m.BaseURL
		}
		return fmt.Sprintf("openai: %s at %s", m.Name, m.BaseURL)
	}
	return m.Backend
}

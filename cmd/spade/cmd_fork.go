package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
)

func init() {
	extraCommands = append(extraCommands, newForkCmd)
}

func newForkCmd(g *globals) *cobra.Command {
	var (
		round      int
		fromSource bool
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "fork SRC_RUN --round N NEW_RUN [--config-from-source]",
		Short: "Start NEW_RUN from SRC_RUN's round N by reference (nothing is copied); later rounds use NEW_RUN's config",
		Long: `Create NEW_RUN whose rounds 0..N are SRC_RUN's: for each table a new
manifest in NEW_RUN lists SRC_RUN's data files, and each round's seal keeps
its round id. NEW_RUN's _RUN.json pins the config this command loads
(--config, SPADE_* variables), or SRC_RUN's own with --config-from-source,
and records fork_of and fork_round. It prints the command that continues
the fork, spade round N+1 --run NEW_RUN with the --config, --store and
SPADE_* settings this command was given. Running fork again with the same
arguments is a no-op, and completes a fork that was interrupted; a NEW_RUN
that exists as something else is a conflict (exit 3).`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usagef("fork needs SRC_RUN and NEW_RUN, got %d arguments", len(args))
			}
			for _, a := range args {
				if err := pipeline.ValidateRunName(a); err != nil {
					return usageError{err}
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if round < 0 {
				return usagef("--round N is required: a sealed round of %s, N >= 0 (got %d)", args[0], round)
			}
			ctx := cmd.Context()
			a, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			cfg := a.cfg
			if fromSource {
				src, err := pipeline.ReadRunFile(ctx, a.store, args[0])
				if err != nil {
					return err
				}
				if err := src.VerifyConfig(); err != nil {
					return err
				}
				cfg = src.Config
			}
			// The fork's later rounds run with cfg: refuse now what round
			// would refuse then.
			if err := preflight(ctx, &cfg, a.store, a.log, checkConfig); err != nil {
				return err
			}
			res, err := pipeline.Fork(ctx, a.store, pipeline.ForkOptions{Source: args[0], Round: round, Target: args[1], Config: cfg})
			if fe := (*pipeline.ForkRoundError)(nil); errors.As(err, &fe) {
				return forkRoundUsage(fe)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(map[string]any{
					"run": res.Run.Run, "fork_of": res.Run.ForkOf, "fork_round": res.Run.ForkRound,
					"config_digest": res.Run.ConfigDigest, "manifests": res.Manifests, "round_id": res.Seals[len(res.Seals)-1].Digest(),
					"already_forked": res.Existed,
				})
			}
			what := "forked from %s at round %d"
			if res.Existed {
				what = "was already forked from %s at round %d, nothing written"
			}
			fmt.Printf("run %s "+what+" (%d manifests by reference, round id %.16s); %s\n",
				args[1], args[0], round, res.Manifests, res.Seals[len(res.Seals)-1].Digest(), continueHint(cmd, a, cfg, args[1], round+1))
			return nil
		},
	}
	cmd.Flags().IntVar(&round, "round", -1, "last round of SRC_RUN the fork shares (required)")
	cmd.Flags().BoolVar(&fromSource, "config-from-source", false, "pin SRC_RUN's config instead of the loaded one")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// forkRoundUsage is a --round that is not a sealed round of the source
// as a usage error (exit 2, as status and diff refuse a --round out of
// range), naming the rounds that are. A source that does not exist, or
// whose round is sealed while an earlier seal is missing (damage, not
// usage), stays Fork's error (exit 1).
func forkRoundUsage(e *pipeline.ForkRoundError) error {
	switch e.LastSealed {
	case -1:
		return usagef("run %s has no sealed round yet; --round %d must be one (round 0 is sealed by spade round 1 or spade commit --round 0 --stage corpus --seal)", e.Source, e.Round)
	case 0:
		return usagef("run %s has only round 0 sealed; --round %d is not a sealed round of it", e.Source, e.Round)
	}
	return usagef("run %s has sealed rounds 0 to %d; --round %d is not one of them", e.Source, e.LastSealed, e.Round)
}

// continueHint says how to run round next of the fork run: a shell command
// with the --config and --store this invocation was given (flag or
// SPADE_CONFIG/SPADE_STORE) and the SPADE_* variables that set pinned
// settings, so that its config has the digest the fork pinned (cfg). When
// cfg is the source's (--config-from-source) and differs from the loaded
// config, no such command is known, and the hint says so.
func continueHint(cmd *cobra.Command, a *app, cfg config.Config, run string, next int) string {
	if cfg.Digest() != a.cfg.Digest() {
		return fmt.Sprintf("continue with spade round %d --run %s and a config of digest %.12s (the source run's; this command loaded one of digest %.12s)", next, shQuote(run), cfg.Digest(), a.cfg.Digest())
	}
	var words []string
	pinned := a.cfg.Pinned()
	for _, k := range config.Keys() {
		name := a.src[k]
		if name != config.EnvName(k) || pinned.Get(k) != a.cfg.Get(k) {
			continue // not set by a variable, or an operational setting (not pinned)
		}
		words = append(words, name+"="+shQuote(os.Getenv(name)))
	}
	words = append(words, "spade")
	if a.g.configPath != "" {
		words = append(words, "--config", shQuote(a.g.configPath))
	}
	if f := cmd.Flag("store"); (f != nil && f.Changed) || os.Getenv("SPADE_STORE") != "" {
		words = append(words, "--store", shQuote(a.store.URL()))
	}
	words = append(words, "--run", shQuote(run), "round", strconv.Itoa(next))
	return "continue with: " + strings.Join(words, " ")
}

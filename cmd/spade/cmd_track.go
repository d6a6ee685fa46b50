package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/spade-pipeline/spade/engines/track"
	"github.com/spade-pipeline/spade/pipeline"
)

func init() {
	extraCommands = append(extraCommands, newTrackCmd)
}

// trackRound logs sealed round r to the run's trackers (observe.trackers;
// nothing without any) and logs what each did. `spade round` calls it after
// every round it seals or finds sealed, so that a round whose logging was
// cut short is logged by the next invocation; the trackers' own records
// keep a round from being logged twice.
func trackRound(ctx context.Context, a *app, r int) error {
	if len(a.cfg.Observe.Trackers) == 0 || r < 1 {
		return nil
	}
	res, err := track.LogRound(ctx, a.store, a.g.runName, r, a.cfg.Observe, a.cfg.Digest())
	if err != nil {
		return fmt.Errorf("round %d is sealed, but logging it to the trackers failed (run `spade track --round %d` or the round again to retry): %w", r, r, err)
	}
	for _, name := range a.cfg.Observe.Trackers {
		a.log.Info("tracker", "tracker", name, "round", r, "result", res[name])
	}
	return nil
}

func newTrackCmd(g *globals) *cobra.Command {
	var round int
	var all bool
	cmd := &cobra.Command{
		Use:   "track --round N | --all",
		Short: "Log sealed rounds' metrics and train metrics to the trackers of observe.trackers (each round once)",
		Long: `Log round N (or, with --all, every sealed round) to the experiment
trackers of observe.trackers: mlflow, wandb, tensorboard. spade round does
this after each seal by itself; spade track is for the DAG of one round per
trigger, for a tracker added to a run later, and for retrying. Each tracker
is asked first whether it has the round (its marker metric spade/round at
step N), so a round is logged once however often this runs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if all == cmd.Flags().Changed("round") {
				return usagef("give --round N or --all")
			}
			if !all && round < 1 {
				return usagef("--round %d: want a round >= 1 (round 0 is the corpus and has no metrics)", round)
			}
			ctx := cmd.Context()
			a, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			if len(a.cfg.Observe.Trackers) == 0 {
				return usagef("observe.trackers is empty: set it (e.g. SPADE_OBSERVE_TRACKERS=mlflow,tensorboard) to log rounds")
			}
			rounds := []int{round}
			if all {
				rounds = nil
				for r := 1; ; r++ {
					if _, err := pipeline.ReadSeal(ctx, a.store, g.runName, r); errors.Is(err, pipeline.ErrNotCommitted) {
						break
					} else if err != nil {
						return err
					}
					rounds = append(rounds, r)
				}
			}
			for _, r := range rounds {
				res, err := track.LogRound(ctx, a.store, g.runName, r, a.cfg.Observe, a.cfg.Digest())
				if err != nil {
					return err
				}
				parts := make([]string, 0, len(res))
				for _, name := range a.cfg.Observe.Trackers {
					parts = append(parts, name+" "+res[name])
				}
				fmt.Printf("round %d of run %s: %s\n", r, g.runName, strings.Join(parts, ", "))
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&round, "round", 0, "round to log (>= 1)")
	cmd.Flags().BoolVar(&all, "all", false, "log every sealed round")
	return cmd
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/engines/model/serving"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/stages/all"
)

// runner builds the pipeline runner with every stage.
func (a *app) runner() (*pipeline.Runner, *engine.Engines) {
	eng := &engine.Engines{Config: &a.cfg, Store: a.store, Log: a.log}
	r := &pipeline.Runner{Store: a.store, Run: a.g.runName, Config: a.cfg, Stages: all.Stages(eng), Log: a.log}
	if term.IsTerminal(int(os.Stderr.Fd())) {
		r.Progress = progress(eng)
	}
	return r, eng
}

// progress draws one bar per stage on a terminal (never in logs or CI):
// parts done, and once a second the model calls in flight against
// model.concurrency and the calls finished per second.
func progress(eng *engine.Engines) pipeline.ProgressFunc {
	var (
		mu   sync.Mutex
		bar  *progressbar.ProgressBar
		cur  string
		stop chan struct{}
	)
	finish := func() {
		if bar != nil {
			_ = bar.Finish()
		}
		if stop != nil {
			close(stop)
			stop = nil
		}
	}
	return func(stage string, done, total int) {
		mu.Lock()
		defer mu.Unlock()
		if stage != cur || bar == nil {
			finish()
			cur = stage
			bar = progressbar.NewOptions(total, progressbar.OptionSetDescription(stage), progressbar.OptionSetWriter(os.Stderr),
				progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
			stop = make(chan struct{})
			go func(b *progressbar.ProgressBar, stop chan struct{}) {
				rr := eng.NewRateReader()
				t := time.NewTicker(time.Second)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case <-t.C:
						if r := rr.Read(); r.InFlight > 0 || r.PerSecond > 0 {
							mu.Lock()
							b.Describe(stage + " (" + r.String() + ")")
							mu.Unlock()
						}
					}
				}
			}(bar, stop)
		}
		_ = bar.Set(done)
		if done == total {
			finish()
		}
	}
}

func parseRound(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, usagef("round %q: want a number >= 1 or \"next\"", s)
	}
	return n, nil
}

func newRoundCmd(g *globals) *cobra.Command {
	var asJSON bool
	var leaseTTL float64
	cmd := &cobra.Command{
		Use:   "round N|next",
		Short: "Run every stage of round N (or the next uncommitted round), resuming what is left",
		Long: `Run every stage of round N that is not committed yet, then seal the round.
A round that is already sealed is left alone (exit 0). Round N needs round
N-1 sealed; round 1 commits the run's corpus (round 0) first if needed.
"next" runs the first unsealed round under the run's lease, for cron: a
concurrent invocation exits with code 4 (busy). A lease left by a process
of this host that no longer runs (killed, OOM, reboot) is taken over at
once; one of another host only after --lease-ttl seconds.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if args[0] != "next" && cmd.Flags().Changed("lease-ttl") {
				return usagef("--lease-ttl applies to 'spade round next' only (round %s takes no lease)", args[0])
			}
			if args[0] == "next" && (!(leaseTTL > 0) || math.IsInf(leaseTTL, 1) || leaseTTL*float64(time.Second) >= math.MaxInt64) {
				return usagef("--lease-ttl %g: want a number of seconds > 0 (and below 292 years)", leaseTTL)
			}
			ctx := cmd.Context()
			a, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			if err := preflight(ctx, &a.cfg, a.store, a.log, checkConfig|checkTrainer|checkEval|checkReplay); err != nil {
				return err
			}
			r, eng := a.runner()
			defer eng.Close()
			// One server per round (docs/serving.md): the round's
			// model-calling stages share the managed server of their
			// checkpoint; it stops before the trainer, when another
			// checkpoint is served (eval of checkpoint(r)) and here.
			eng.Servers = &serving.Pool{Log: a.log}
			defer eng.Servers.Close(context.WithoutCancel(ctx))
			var round int
			if args[0] == "next" {
				lease, err := pipeline.TakeLease(ctx, a.store, g.runName, leaseTTL, a.log)
				if err != nil {
					return err
				}
				defer lease.Release()
				// Fencing: once another invocation has taken the lease
				// over (this one was stopped past its expiry), the round
				// is cancelled and no further manifest or seal is written.
				ctx = lease.Context()
				r.Fence = lease.Check
				if round, err = pipeline.NextRound(ctx, a.store, g.runName); err != nil {
					return leaseLost(ctx, err)
				}
			} else if round, err = parseRound(args[0]); err != nil {
				return err
			}
			res, err := runRounds(ctx, r, round)
			if err != nil {
				return leaseLost(ctx, err)
			}
			if err := trackRound(ctx, a, round); err != nil {
				return leaseLost(ctx, err)
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(res)
			}
			if res.AlreadySealed {
				fmt.Printf("round %d of run %s is already committed (round id %s); nothing to do\n", round, g.runName, res.Seal.Digest()[:16])
				return nil
			}
			fmt.Printf("round %d of run %s committed (round id %s), %s: ran %v, already committed %v\n", round, g.runName, res.Seal.Digest()[:16], roundKind(g.runName, round, &a.cfg), res.Ran, res.Skipped)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().Float64Var(&leaseTTL, "lease-ttl", 6*3600, "with next: seconds after which another invocation may take over a lease whose holder stopped renewing it (> 0)")
	return cmd
}

// roundKind says whether round (>= 1) generates a fresh pool, in the words
// round prints: "regeneration round (regenerate_every = 4)", or "pool
// round (no regeneration: regenerate_every = 4)" for a round that plays
// the pool carried forward (docs/method.md step 8), whose labels then have no
// regret (docs/regret.md).
func roundKind(run string, round int, cfg *config.Config) string {
	if pipeline.NewRoundInfo(run, round, cfg).Regeneration {
		return fmt.Sprintf("regeneration round (regenerate_every = %d)", cfg.RegenerateEvery)
	}
	if cfg.FixedPool() {
		return "pool round (fixed pool: design.mode = fixed_pool, no regeneration)"
	}
	return fmt.Sprintf("pool round (no regeneration: regenerate_every = %d)", cfg.RegenerateEvery)
}

// leaseLost returns err, or, when ctx was cancelled because the run's lease
// was lost (pipeline.ErrLeaseLost), that cause: exit 1 with the reason, not
// exit 130 (interrupted) for the parts the cancellation cut short.
func leaseLost(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, pipeline.ErrLeaseLost) && !errors.Is(err, pipeline.ErrLeaseLost) {
		return fmt.Errorf("round stopped: %w", cause)
	}
	return err
}

// runRounds runs round n; before round 1 it seals round 0 (the embedded
// corpus) unless the run already has one. Under design.mode fixed_pool,
// round 1 is refused (a usage error naming the command) while round 0
// holds no imported pool, before round 0 could be sealed without one.
func runRounds(ctx context.Context, r *pipeline.Runner, n int) (*pipeline.RoundResult, error) {
	if n == 1 && r.Config.FixedPool() {
		_, err := pipeline.ReadManifest(ctx, r.Store, pipeline.ManifestKey(r.Run, 0, "pool"))
		if errors.Is(err, storage.ErrNotFound) {
			return nil, usagef("run %s has design.mode fixed_pool and no imported pool: import one first (`spade --run %s pool import PATH...`, docs/recipes.md \"Fixed-pool baselines\")", r.Run, r.Run)
		}
		if err != nil {
			return nil, err
		}
	}
	if n == 1 {
		if _, err := r.RunRound(ctx, 0); err != nil {
			return nil, err
		}
	}
	return r.RunRound(ctx, n)
}

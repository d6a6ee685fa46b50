package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/spade-pipeline/spade/pipeline"
)

func newStageCmd(g *globals) *cobra.Command {
	var round int
	var shard string
	cmd := &cobra.Command{
		Use:   "stage NAME --round N [--shard i/n]",
		Short: "Run one stage of round N (one shard of it with --shard), for Airflow, Kubernetes or Slurm tasks",
		Long: `Run one stage of round N. Its inputs must be committed. Without --shard the
stage's tables are committed when it ends. With --shard i/n only the parts
p with p % n == i are written, and the tables are committed by
"spade commit --round N --stage NAME" once every shard is done.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case !cmd.Flags().Changed("round"):
				return usagef("--round N is required (the round the stage runs at, N >= 0)")
			case round < 0:
				return usagef("--round %d: want N >= 0", round)
			}
			sh := pipeline.Shard{Index: 0, Count: 1}
			if shard != "" {
				var err error
				if sh, err = pipeline.ParseShard(shard); err != nil {
					return usageError{err}
				}
			}
			ctx := cmd.Context()
			a, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			// No checkEval: the eval stage checks its suites itself
			// (evaluate.ServeAndScore) before it starts a server.
			if err := preflight(ctx, &a.cfg, a.store, a.log, checkConfig|checkTrainer|checkReplay); err != nil {
				return err
			}
			r, eng := a.runner()
			defer eng.Close()
			if _, err := r.StageByName(args[0]); err != nil {
				return usageError{err}
			}
			ran, err := r.RunStage(ctx, round, args[0], sh, shard == "")
			if err != nil {
				return err
			}
			switch {
			case !ran:
				fmt.Printf("stage %s of round %d is already committed\n", args[0], round)
			case shard != "":
				fmt.Printf("stage %s of round %d: shard %s written\n", args[0], round, shard)
			default:
				fmt.Printf("stage %s of round %d committed\n", args[0], round)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&round, "round", -1, "round number")
	cmd.Flags().StringVar(&shard, "shard", "", "run only shard i of n (i/n, 0 <= i < n)")
	return cmd
}

func newCommitCmd(g *globals) *cobra.Command {
	var round int
	var stage string
	var seal bool
	cmd := &cobra.Command{
		Use:   "commit --round N --stage NAME",
		Short: "Commit a sharded stage's tables once every shard has written its parts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case round < 0 && !cmd.Flags().Changed("round"):
				return usagef("--round N is required")
			case round < 0:
				return usagef("--round %d: want N >= 0", round)
			case stage == "":
				return usagef("--stage NAME is required")
			}
			ctx := cmd.Context()
			a, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			r, eng := a.runner()
			defer eng.Close()
			if _, err := r.StageByName(stage); err != nil {
				return usageError{err}
			}
			wrote, err := r.CommitStage(ctx, round, stage)
			if err != nil {
				return err
			}
			if wrote {
				fmt.Printf("stage %s of round %d committed\n", stage, round)
			} else {
				fmt.Printf("stage %s of round %d is already committed\n", stage, round)
			}
			if seal {
				// Seal returns an existing seal as it is; whether there
				// was one is read first, so that the sentence says what
				// this call did (a concurrent seal in between is
				// reported as this call's, which it equals).
				_, before := pipeline.ReadSeal(ctx, a.store, g.runName, round)
				s, err := r.Seal(ctx, round)
				if err != nil {
					return err
				}
				if before == nil {
					fmt.Printf("round %d is already sealed (round id %s)\n", round, s.Digest()[:16])
				} else {
					fmt.Printf("round %d sealed (round id %s)\n", round, s.Digest()[:16])
				}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&round, "round", -1, "round number")
	cmd.Flags().StringVar(&stage, "stage", "", "stage name")
	cmd.Flags().BoolVar(&seal, "seal", false, "also seal the round (every stage of it must be committed)")
	return cmd
}

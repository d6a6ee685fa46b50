package main

import (
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/spade-pipeline/spade/internal/termtext"
	"github.com/spade-pipeline/spade/pipeline/gc"
)

func init() {
	extraCommands = append(extraCommands, newGCCmd)
}

func newGCCmd(g *globals) *cobra.Command {
	var (
		grace   time.Duration
		dryRun  bool
		allRuns bool
		asJSON  bool
		keep    string
	)
	cmd := &cobra.Command{
		Use:   "gc [--grace 24h] [--dry-run] [--all-runs] [--json] [--keep-checkpoints RULE]",
		Short: "Delete part files and part records that no manifest of any run references, past a grace period",
		Long: `Find the part files (<run>/round=N/<table>/part-*.parquet) that no
committed manifest of any run in the store lists and no live part record
(a sharded stage awaiting spade commit) names, and the part records of
stages already committed or of sealed rounds, and what writes whose
writer was killed left behind (kind temp: .spade-tmp-* files on a file://
store, incomplete multipart uploads on S3); delete or abort those older
than --grace (by the store's modification time). Manifests, seals, run files
and checkpoint files are never touched, and files a fork lists in this
run are kept. Collects the run given by --run, or every run with
--all-runs. --dry-run only lists.

gc never races a round: it deletes a run's files only while it holds the
run's gc lease (<run>/_LEASE.gc.json) and no writer (spade round, stage,
commit, corpus import, fork) is registered in the run; writers wait while
a gc holds it. A run being written is left alone: with --run, gc exits 4
(busy) naming the writer; with --all-runs it is skipped with a warning.
The grace period is kept for objects written by other tools or older
builds; it need not exceed a stage's run time (docs/format.md, "Writers
and gc").

Checkpoints (docs/operations.md, "Checkpoint retention"): gc removes the
optimizer state (optimizer/) of rounds older than the run's last
grpo.keep_optimizer_rounds rounds with optimizer state, and with
--keep-checkpoints RULE the weights of the rounds RULE does not keep:
last:K (the K newest), every:M (multiples of M), all; comma-separated, e.g.
last:2,every:10. Never removed: the checkpoint of the run's last sealed
round and of later rounds (the next round's policy), and of each round a
fork forked at. Each round's removal is recorded in
<run>/round=N/checkpoints/_REMOVED.json before any file goes, and a later
read of a removed file says "removed by spade gc" with the rule.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if grace < 0 {
				return usagef("--grace must be >= 0 (got %s)", grace)
			}
			ctx := cmd.Context()
			a, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			opts := gc.Options{Run: g.runName, Grace: grace, DryRun: dryRun, Log: a.log}
			if cmd.Flags().Changed("keep-checkpoints") {
				rule, err := gc.ParseKeepRule(keep)
				if err != nil {
					return usagef("%v", err)
				}
				opts.KeepCheckpoints = &rule
			}
			if allRuns {
				opts.Run = ""
			}
			res, err := gc.Collect(ctx, a.store, opts)
			if res != nil && asJSON {
				if jerr := json.NewEncoder(os.Stdout).Encode(res); jerr != nil && err == nil {
					err = jerr
				}
			} else if res != nil {
				printGC(res, dryRun)
			}
			if err != nil {
				return err
			}
			for _, w := range res.Warnings {
				a.log.Warn("gc kept objects", "detail", w)
			}
			for _, b := range res.Busy {
				a.log.Warn("gc left a run alone", "detail", b)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.DurationVar(&grace, "grace", gc.DefaultGrace, "delete only garbage at least this old")
	f.BoolVar(&dryRun, "dry-run", false, "list what would be deleted, delete nothing")
	f.BoolVar(&allRuns, "all-runs", false, "collect every run in the store, not only --run")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	f.StringVar(&keep, "keep-checkpoints", "", "also remove checkpoint weights of rounds this rule does not keep: last:K, every:M, all (comma-separated)")
	return cmd
}

func printGC(res *gc.Result, dryRun bool) {
	tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	if len(res.Garbage) > 0 {
		fmt.Fprintln(tw, "ACTION\tKIND\tBYTES\tMODIFIED\tKEY\tWHY")
	}
	kept := 0
	for _, o := range res.Garbage {
		action := "deleted"
		switch {
		case o.WithinGrace:
			action = "kept (grace)"
			kept++
		case dryRun:
			action = "would delete"
		case !o.Deleted:
			action = "not deleted"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", action, o.Kind, o.Bytes, o.ModTime.UTC().Format(time.RFC3339), termtext.Safe(o.Key), o.Why)
	}
	_ = tw.Flush()
	fmt.Printf("%d manifests read, %d files referenced; %d unreferenced or past retention, %d deleted (%d bytes), %d within the grace period\n",
		res.Manifests, res.Referenced, len(res.Garbage), res.Deleted, res.DeletedBytes, kept)
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/diff"
	"github.com/spade-pipeline/spade/pipeline/storage"
	// --store and --store-b may name any backend, s3:// included.
)

func init() {
	extraCommands = append(extraCommands, newDiffCmd)
}

func newDiffCmd(g *globals) *cobra.Command {
	var (
		round   int
		tableF  string
		asJSON  bool
		storeB  string
		maxRows int
		all     bool
		verify  bool
	)
	cmd := &cobra.Command{
		Use:   "diff RUN_A RUN_B [--round N] [--table T] [--json] [--store-b URL]",
		Short: "Compare two runs table by table: content digests first, then rows by key (exit 0 equal, 1 different, 2 trouble)",
		Long: `Compare every committed table of two runs, round by round. Tables whose
manifests have equal content digests are equal without reading a row;
the others are compared row by row on the table's key columns and
reported as added, removed and changed rows, with each changed column's
old and new value (truncated). RUN_A is read from --store, RUN_B from
--store-b when given (e.g. a local run against the same run on S3).

Digests compare what the manifests record, not what the store still
holds: with --verify both runs are first read in full as spade verify
reads them, and a damaged or missing file is trouble (exit 2).

Exit codes: 0 the runs are equal, 1 they differ, 2 trouble: a usage
error, a run that does not exist, a store or table that cannot be read
(so no failure reads as "they differ"); 130 when interrupted.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usagef("diff needs two run names, got %d arguments", len(args))
			}
			for _, a := range args {
				if err := pipeline.ValidateRunName(a); err != nil {
					return usageError{err}
				}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			defer func() {
				var ee exitError
				if err != nil && !errors.As(err, &ee) {
					err = troubleError{err}
				}
			}()
			ctx := cmd.Context()
			a, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			if maxRows < -1 {
				return usagef("--max-rows must be -1 (all) or >= 0 (got %d)", maxRows)
			}
			opts := diff.Options{Tables: a.tableNames(), MaxRows: maxRows}
			if tableF != "" {
				if !slices.Contains(opts.Tables, tableF) {
					return usagef("--table %q: no stage writes it (tables: %s)", tableF, strings.Join(opts.Tables, ", "))
				}
				opts.Tables = []string{tableF}
			}
			if cmd.Flags().Changed("round") {
				if round < 0 {
					return usagef("--round must be >= 0 (got %d)", round)
				}
				opts.Rounds = []int{round}
			}
			sb := a.store
			if storeB != "" {
				if sb, err = storage.Open(ctx, storeB); err != nil {
					return err
				}
				defer func() { _ = sb.Close() }()
			}
			sides := []diffSide{{a.store, args[0]}, {sb, args[1]}}
			if err := checkDiffRuns(ctx, sides); err != nil {
				return err
			}
			if verify {
				if err := verifyDiffRuns(ctx, sides, a.tableNames(), opts.Rounds); err != nil {
					return err
				}
			}
			rep, err := diff.Runs(ctx, diff.Side{Store: a.store, Run: args[0]}, diff.Side{Store: sb, Run: args[1]}, opts)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				err = enc.Encode(rep)
			} else {
				err = rep.WriteText(os.Stdout, all)
			}
			// The report is complete before it is written: when its reader
			// has gone (spade diff | head), the verdict still decides the
			// exit code, or runs that differ would exit 0, "equal".
			if err != nil && !stdoutClosed(err) {
				return err
			}
			if !rep.Equal {
				return exitError{code: exitDifferent}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&round, "round", 0, "compare only this round (default: every round either run committed)")
	f.StringVar(&tableF, "table", "", "compare only this table")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.StringVar(&storeB, "store-b", "", "store URL of RUN_B (default: --store)")
	f.IntVar(&maxRows, "max-rows", diff.DefaultMaxRows, "row changes listed per table (counts are always complete; -1: all)")
	f.BoolVar(&all, "all", false, "also list the tables that are equal")
	f.BoolVar(&verify, "verify", false, "first read every file of both runs and check it (spade verify); damage is trouble (exit 2)")
	return cmd
}

// diffSide is one run spade diff compares and the store it is read from;
// it exists so both runs go through the same checks.
type diffSide struct {
	st  storage.Store
	run string
}

// checkDiffRuns returns an error naming the first side whose run does not
// exist in its store ("run R does not exist in URL"), or the store's error
// reading its run file; split out of newDiffCmd.
func checkDiffRuns(ctx context.Context, sides []diffSide) error {
	for _, side := range sides {
		if _, err := pipeline.ReadRunFile(ctx, side.st, side.run); err != nil {
			if errors.Is(err, pipeline.ErrNotCommitted) {
				return fmt.Errorf("run %s does not exist in %s", side.run, side.st.URL())
			}
			return err
		}
	}
	return nil
}

// verifyDiffRuns is spade diff --verify: each side's run is read in full
// (pipeline.Verify over tables, the one round of rounds when it names
// exactly one, else every round); damage is an error wrapping
// pipeline.ErrIntegrity that lists each damaged object. Split out of
// newDiffCmd.
func verifyDiffRuns(ctx context.Context, sides []diffSide, tables []string, rounds []int) error {
	// Digests compare what the manifests say; only reading the
	// files shows that the store still holds it.
	vround := -1
	if len(rounds) == 1 {
		vround = rounds[0]
	}
	for _, side := range sides {
		vr, err := pipeline.Verify(ctx, side.st, side.run, pipeline.VerifyOptions{Tables: tables, Round: vround})
		if err != nil {
			return err
		}
		if len(vr.Damage) > 0 {
			var lines []string
			for _, d := range vr.Damage {
				lines = append(lines, d.Key+": "+d.Problem)
			}
			return fmt.Errorf("run %s in %s is damaged (%d objects), so it cannot be compared: %w:\n%s", side.run, side.st.URL(), len(vr.Damage), pipeline.ErrIntegrity, strings.Join(lines, "\n"))
		}
	}
	return nil
}

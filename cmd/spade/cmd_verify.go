package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"

	"github.com/spf13/cobra"

	"github.com/spade-pipeline/spade/engines/evaluate"
	"github.com/spade-pipeline/spade/internal/termtext"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/storage"
)

func init() {
	extraCommands = append(extraCommands, newVerifyCmd)
}

// runFileKeyRe matches a run file's key, "<run>/_RUN.json".
var runFileKeyRe = regexp.MustCompile(`^([^/]+)/_RUN\.json$`)

// verifyJSON is what `spade verify --json` prints.
type verifyJSON struct {
	OK   bool                     `json:"ok"`
	Runs []*pipeline.VerifyReport `json:"runs"`
}

func newVerifyCmd(g *globals) *cobra.Command {
	var (
		round   int
		allRuns bool
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "verify [--round R] [--all-runs] [--json]",
		Short: "Read every committed file of the run and its side files (checkpoints, evaluations) and check sha256, size, row counts and the manifest/seal chain (exit 1 naming each damaged file)",
		Long: `Read everything the run has committed and check it: the run file, each
round's seal and its hash chain, each manifest against the content digest
its seal records, and every data file the manifests list, read in full
(size, sha256, and the row and row group counts of its Parquet footer).
The part records of a round in progress are checked too, and so are the
side files outside the tables: every checkpoint file a checkpoints table
lists (size and sha256; one that spade gc removed by a retention rule is
listed as removed, not damaged), and every evaluation that spade eval
kept under <run>/evals/, against the side record written after it (one
without a record is listed as unrecorded: nothing gives its digest). Every damaged,
missing or disagreeing object is named, with the command that repairs it
when one exists (running an unsealed round again rewrites a damaged part
that is not committed yet; nothing rewrites a committed or sealed table,
and verify says how to restore or branch instead). Part records left in
sealed rounds are listed; spade gc removes them.

--round R checks one round; --all-runs every run in the store.
Exit codes: 0 nothing damaged, 1 damage found, 2 usage, 130 interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("round") && round < 0 {
				return usagef("--round must be >= 0 (got %d)", round)
			}
			if !cmd.Flags().Changed("round") {
				round = -1
			}
			ctx := cmd.Context()
			a, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			runs := []string{g.runName}
			if allRuns {
				if runs, err = storeRuns(ctx, a.store); err != nil {
					return err
				}
			}
			out := verifyJSON{OK: true, Runs: []*pipeline.VerifyReport{}}
			damaged := 0
			for _, run := range runs {
				rep, err := pipeline.Verify(ctx, a.store, run, pipeline.VerifyOptions{Tables: a.tableNames(), Round: round, SideDirs: []string{evaluate.SideDir}})
				if err != nil {
					return err
				}
				out.Runs = append(out.Runs, rep)
				damaged += len(rep.Damage)
				if !asJSON {
					printVerify(rep)
				}
			}
			out.OK = damaged == 0
			if asJSON {
				if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
					return err
				}
			}
			if damaged > 0 {
				return exitError{code: exitFailure, msg: fmt.Sprintf("verify: %d damaged or missing objects (listed above)", damaged)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&round, "round", 0, "verify only this round")
	f.BoolVar(&allRuns, "all-runs", false, "verify every run in the store")
	f.BoolVar(&asJSON, "json", false, "print the reports as JSON")
	return cmd
}

// storeRuns lists the runs of the store: those with a run file.
func storeRuns(ctx context.Context, s storage.Store) ([]string, error) {
	infos, err := s.List(ctx, "")
	if err != nil {
		return nil, err
	}
	var runs []string
	for _, in := range infos {
		if m := runFileKeyRe.FindStringSubmatch(in.Key); m != nil {
			runs = append(runs, m[1])
		}
	}
	sort.Strings(runs)
	return runs, nil
}

func printVerify(rep *pipeline.VerifyReport) {
	for _, d := range rep.Damage {
		fmt.Printf("DAMAGED %s\n  %s\n", termtext.Safe(d.Key), termtext.Safe(d.Problem))
		if d.Repair != "" {
			fmt.Printf("  repair: %s\n", termtext.Safe(d.Repair))
		} else if d.Hint != "" {
			fmt.Printf("  no command repairs it: %s\n", termtext.Safe(d.Hint))
		}
	}
	for _, k := range rep.Leftovers {
		fmt.Printf("leftover part record %s (of a sealed round; spade gc removes it)\n", termtext.Safe(k))
	}
	for _, k := range rep.RemovedByGC {
		fmt.Printf("removed by spade gc %s (a checkpoint retention rule; the round's checkpoints/_REMOVED.json says which)\n", termtext.Safe(k))
	}
	for _, k := range rep.Unrecorded {
		fmt.Printf("unrecorded side file %s (no side record gives its sha256, so its content is not checked; the command that wrote it writes it again with one)\n", termtext.Safe(k))
	}
	verdict := "ok"
	if len(rep.Damage) > 0 {
		verdict = fmt.Sprintf("%d damaged", len(rep.Damage))
	}
	fmt.Printf("run %s: %d rounds (%d sealed), %d manifests, %d files (%d bytes) and %d side files (%d bytes) read: %s\n",
		termtext.Safe(rep.Run), len(rep.Rounds), rep.Sealed, rep.Manifests, rep.Files, rep.Bytes, rep.SideFiles, rep.SideBytes, verdict)
}

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/spade-pipeline/spade/pipeline"
)

// statusTable is one row of spade status.
type statusTable struct {
	Round            int    `json:"round"`
	Table            string `json:"table"`
	Rows             int64  `json:"rows"`
	Bytes            int64  `json:"bytes"`
	Files            int    `json:"files"`
	Stage            string `json:"stage"`
	StageFingerprint string `json:"stage_fingerprint"`
	ContentDigest    string `json:"content_digest"`
	Reference        string `json:"reference_of,omitempty"`
}

type statusRound struct {
	Round  int           `json:"round"`
	Sealed bool          `json:"sealed"`
	ID     string        `json:"round_id,omitempty"`
	Tables []statusTable `json:"tables"`
}

func newStatusCmd(g *globals) *cobra.Command {
	var round int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [--round N] [--json]",
		Short: "Show the run's committed rounds and tables (rows, bytes, fingerprints)",
		Long: `Show the run's committed rounds and tables: rows, bytes, files, stage,
stage fingerprint and content digest per table, and the next round to run.
A run made by a spade fork that was interrupted is refused (exit 1), with
the fork command to run again, and so is a sealed round whose manifests
are not those its seal records (exit 1, integrity check failed, naming
the manifest and the seal).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			a, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			rf, err := pipeline.ReadRunFile(ctx, a.store, g.runName)
			if err != nil {
				return err
			}
			if err := pipeline.CheckForkComplete(ctx, a.store, g.runName, rf); err != nil {
				return err
			}
			r, eng := a.runner()
			defer eng.Close()
			next, err := pipeline.NextRound(ctx, a.store, g.runName)
			if err != nil {
				return err
			}
			lo, hi := 0, next
			if cmd.Flags().Changed("round") {
				if round < 0 || round > next {
					// A round past the first unsealed one cannot hold tables.
					return usagef("--round %d: run %s has rounds 0 to %d (the next to run)", round, g.runName, next)
				}
				lo, hi = round, round
			}
			rounds := []statusRound{} // [] not null in JSON
			for n := lo; n <= hi; n++ {
				sr := statusRound{Round: n}
				seal, err := pipeline.ReadSeal(ctx, a.store, g.runName, n)
				if err == nil {
					sr.Sealed, sr.ID = true, seal.Digest()
				} else if !errors.Is(err, pipeline.ErrNotCommitted) {
					return err
				}
				ms, err := r.TableManifests(ctx, n)
				if err != nil {
					return err
				}
				if sr.Sealed {
					// Never show a sealed round's tables as other than
					// the seal records them.
					if err := pipeline.CheckSealedManifests(g.runName, seal, ms); err != nil {
						return err
					}
				}
				for _, name := range sortedNames(ms) {
					m := ms[name]
					sr.Tables = append(sr.Tables, statusTable{Round: n, Table: name, Rows: m.Rows, Bytes: m.Bytes, Files: len(m.Files), Stage: m.Stage, StageFingerprint: m.StageFingerprint, ContentDigest: m.ContentDigest(), Reference: m.ReferenceOf})
				}
				if len(sr.Tables) > 0 || sr.Sealed {
					rounds = append(rounds, sr)
				}
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(map[string]any{"run": g.runName, "store": a.store.URL(), "next_round": next, "rounds": rounds})
			}
			fmt.Printf("run %s in %s; next round: %d\n", g.runName, a.store.URL(), next)
			tw := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ROUND\tSEALED\tTABLE\tROWS\tBYTES\tFILES\tSTAGE\tFINGERPRINT\tDIGEST")
			for _, sr := range rounds {
				for _, t := range sr.Tables {
					ref := ""
					if t.Reference != "" {
						ref = " (ref)"
					}
					fmt.Fprintf(tw, "%d\t%v\t%s%s\t%d\t%d\t%d\t%s\t%s\t%s\n", sr.Round, sr.Sealed, t.Table, ref, t.Rows, t.Bytes, t.Files, t.Stage, t.StageFingerprint[:12], t.ContentDigest[:12])
				}
			}
			return tw.Flush()
		},
	}
	cmd.Flags().IntVar(&round, "round", 0, "show only this round")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sortStrings(out)
	return out
}

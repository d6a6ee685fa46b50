package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/stages/report"
	"github.com/spade-pipeline/spade/stages/roundmetrics"
)

func init() {
	extraCommands = append(extraCommands, newReportCmd)
}

func newReportCmd(g *globals) *cobra.Command {
	var outPath string
	cmd := &cobra.Command{
		Use:   "report [--out FILE]",
		Short: "Write one offline HTML report of the run: plots over rounds (learnable fraction, win rate, regret, diversity, validity)",
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
			cfg := rf.Config
			var rounds []report.RoundSummary
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
				rounds = append(rounds, roundmetrics.Summary(r, pipeline.NewRoundInfo(g.runName, r, &cfg).Regeneration, rows))
			}
			if len(rounds) == 0 {
				return fmt.Errorf("run %s has no round with metrics yet: %w", g.runName, pipeline.ErrNotCommitted)
			}
			if outPath == "" {
				outPath = g.runName + "-report.html"
			}
			f, err := os.Create(outPath)
			if err != nil {
				return err
			}
			if err := report.Render(f, g.runName, report.Band{Low: cfg.Label.BandLow, High: cfg.Label.BandHigh}, rounds); err != nil {
				f.Close()
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			abs, _ := filepath.Abs(outPath)
			fmt.Printf("wrote %s (%d rounds)\n", abs, len(rounds))
			return nil
		},
	}
	cmd.Flags().StringVar(&outPath, "out", "", "output file (default RUN-report.html)")
	return cmd
}

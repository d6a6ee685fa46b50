package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/spade-pipeline/spade/datasets"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/stages/corpus"
)

func newCorpusCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "corpus", Short: "Manage the run's grounding corpus"}
	var opts datasets.ImportOptions
	var asJSON bool
	imp := &cobra.Command{
		Use:   "import PATH...",
		Short: "Import JSONL(.gz), Parquet or directories of text/markdown as the run's corpus (round 0)",
		Long: `Import documents as the run's versioned corpus table (round 0). Nested JSON
fields are addressed by paths: a.b for objects, a[].b to map over a list.
Several --text paths are concatenated. Documents are deduplicated by the
sha256 of their text; skipped rows are reported with file, line, field and
reason, also when every row is skipped and the import fails. A run has one
corpus: importing a different one into a run that has a corpus is refused
(exit 3); use a new --run. Importing the same inputs again (same names and
contents, same options, by any path from any directory) does nothing.

Example (the unarXive sample):
  spade corpus import --run arxiv datasets/testdata/unarxive-sample/arXiv_src_2212_086.jsonl.gz \
    --id paper_id --title metadata.title --text abstract.text --text 'body_text[].text' \
    --license metadata.license --domain discipline`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			opts.Paths = args
			refuse := func(err error) error {
				if asJSON {
					// As for every failed import: the error on stdout too.
					_ = json.NewEncoder(os.Stdout).Encode(importJSON{Error: err.Error(), ImportReport: &datasets.ImportReport{}})
				}
				return err
			}
			// Options and inputs are checked before the store is opened:
			// a bad flag is a usage error (exit 2) whatever the run holds,
			// never a conflict with its corpus (exit 3) or an error of the
			// corpus stage.
			var oe *datasets.OptionError
			if err := opts.Check(); errors.As(err, &oe) {
				return refuse(usagef("corpus import: --%s: %v", oe.Option, oe.Err))
			} else if err != nil {
				return refuse(usagef("corpus import: %v", err))
			}
			digests := make([]string, len(args))
			for i, p := range args {
				d, err := datasets.InputDigest(opts, p)
				if err != nil {
					return refuse(usagef("corpus import: %v", err))
				}
				digests[i] = d
				if err := opts.CheckPath(p); errors.Is(err, datasets.ErrBadOptions) {
					return refuse(usagef("corpus import: %v", err))
				}
			}
			a, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer a.close()
			var rep datasets.ImportReport
			st := &corpus.Import{Options: opts, InputDigests: digests, Report: &rep}
			r := &pipeline.Runner{Store: a.store, Run: g.runName, Config: a.cfg, Stages: []pipeline.Stage{st}, Log: a.log}
			res, err := r.RunRound(ctx, 0)
			if err != nil {
				if errors.Is(err, pipeline.ErrConflict) {
					err = fmt.Errorf("run %s already has a different corpus: %w", g.runName, err)
				}
				if asJSON {
					// The report so far, with the error, so a script reading
					// stdout sees why (the message also goes to stderr).
					_ = json.NewEncoder(os.Stdout).Encode(importJSON{Error: err.Error(), ImportReport: &rep})
				}
				return err
			}
			if res.AlreadySealed || len(res.Ran) == 0 {
				m, err := pipeline.ReadManifest(ctx, a.store, pipeline.ManifestKey(g.runName, 0, "corpus"))
				if err != nil {
					return err
				}
				if m.StageFingerprint != "" && !sameImport(ctx, r, st, m) {
					return exitError{exitConflict, fmt.Sprintf("run %s already has a corpus (%d documents, committed by %s); use a new --run to import another", g.runName, m.Rows, m.Stage)}
				}
				if asJSON {
					return json.NewEncoder(os.Stdout).Encode(importJSON{AlreadyImported: true, Documents: m.Rows})
				}
				fmt.Printf("corpus of run %s already imported (%d documents); nothing to do\n", g.runName, m.Rows)
				return nil
			}
			if asJSON {
				return json.NewEncoder(os.Stdout).Encode(importJSON{Documents: rep.Imported, ImportReport: &rep})
			}
			fmt.Printf("imported %d documents into run %s (read %d, duplicates %d, skipped %d, repaired %d)\n", rep.Imported, g.runName, rep.Read, rep.Duplicates, rep.Skipped, rep.Repaired)
			for _, is := range rep.Issues {
				fmt.Printf("  skipped %s\n", is)
			}
			return nil
		},
	}
	f := imp.Flags()
	f.StringVar(&opts.Format, "format", "auto", "input format: auto, jsonl, parquet or dir")
	f.StringVar(&opts.IDPath, "id", "", "field path of the document id (default: sha256 of the text)")
	f.StringVar(&opts.TitlePath, "title", "", "field path of the title")
	f.StringArrayVar(&opts.TextPaths, "text", nil, "field path of the text (repeat to concatenate; default text)")
	f.StringVar(&opts.LicensePath, "license", "", "field path of the licence")
	f.StringVar(&opts.DomainPath, "domain", "", "field path of the domain")
	f.StringVar(&opts.Source, "source", "", "source label stored on every document (default: file name)")
	f.Int64Var(&opts.MaxDocBytes, "max-doc-bytes", 0, "skip documents longer than this many bytes (default 4 MiB)")
	f.BoolVar(&asJSON, "json", false, "print the import report as JSON")
	cmd.AddCommand(imp)
	return cmd
}

// sameImport reports whether the committed corpus came from this import.
func sameImport(ctx context.Context, r *pipeline.Runner, st *corpus.Import, m *pipeline.Manifest) bool {
	return r.FingerprintOf(ctx, st, 0) == m.StageFingerprint
}

// importJSON is what `corpus import --json` prints: whether the run
// already had this corpus, the documents committed, and, when this
// invocation imported them or tried to, the import report's fields (and
// the error of a failed import).
type importJSON struct {
	AlreadyImported bool   `json:"already_imported"`
	Documents       int64  `json:"documents"`
	Error           string `json:"error,omitempty"` // why the import failed (nothing was committed)
	*datasets.ImportReport
}

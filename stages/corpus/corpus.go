// Package corpus is the round-0 stage that versions the grounding corpus of
// a run (SPADE.md step 1): either the embedded default or an import.
package corpus

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/spade-pipeline/spade/datasets"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// Embedded is the stage that commits the embedded default corpus at round
// 0 when a run has no imported corpus.
type Embedded struct{}

// Name implements pipeline.Stage.
func (Embedded) Name() string { return "corpus" }

// Outputs implements pipeline.Stage.
func (Embedded) Outputs() []pipeline.Output { return []pipeline.Output{{Table: "corpus"}} }

// Plan implements pipeline.Stage: the stage runs at round 0 only.
func (Embedded) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	return nil, ri.Round == 0
}

// ConfigSubset implements pipeline.Stage: the corpus depends on no setting.
func (Embedded) ConfigSubset(*config.Config) any { return "embedded" }

// Parts implements pipeline.Stage: one part, and never an error.
func (Embedded) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }

// Run implements pipeline.Stage: it emits the embedded documents. Errors:
// the embedded corpus does not decode (a build defect), wrapped as
// "embedded corpus".
func (Embedded) Run(_ context.Context, _ *pipeline.Env, _ int, out *pipeline.Out) error {
	docs, err := datasets.Embedded()
	if err != nil {
		return fmt.Errorf("embedded corpus: %w", err)
	}
	// Said out loud: a script whose `corpus import` failed would otherwise
	// go on with the wrong corpus without a word.
	slog.Info("no corpus was imported into this run: its round 0 is the embedded corpus (run `spade corpus import` first to use your own)",
		"documents", len(docs))
	pipeline.Emit(out, schemas.Corpus, "corpus", docs...)
	out.Stat("documents", len(docs))
	return nil
}

// Import is the stage `spade corpus import` runs: it commits the documents
// the importer reads as the run's round-0 corpus. Its fingerprint covers the
// import options and the sha256 of every input file (FileDigests).
type Import struct {
	// Options says what to import and how (paths, format, field paths);
	// it is part of the stage's fingerprint.
	Options datasets.ImportOptions
	// FileDigests maps each input path to its sha256, filled by the caller.
	FileDigests map[string]string
	// Report receives the importer's report after Run.
	Report *datasets.ImportReport
}

// Name implements pipeline.Stage.
func (*Import) Name() string { return "corpus" }

// Outputs implements pipeline.Stage.
func (*Import) Outputs() []pipeline.Output { return []pipeline.Output{{Table: "corpus"}} }

// Plan implements pipeline.Stage.
func (*Import) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	return nil, ri.Round == 0
}

// ConfigSubset implements pipeline.Stage.
func (im *Import) ConfigSubset(*config.Config) any {
	return struct {
		Options datasets.ImportOptions
		Files   map[string]string
	}{im.Options, im.FileDigests}
}

// Parts implements pipeline.Stage: one part, and never an error.
func (*Import) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }

// Run implements pipeline.Stage: it emits every document datasets.Import
// accepts and sets *Report (also on failure). Errors: datasets.Import's,
// as it returns them (see its doc), or none imported ("import produced no
// documents", with the rows read and skipped); nothing is committed then.
func (im *Import) Run(ctx context.Context, _ *pipeline.Env, _ int, out *pipeline.Out) error {
	var n int
	rep, err := datasets.Import(ctx, im.Options, func(d schemas.CorpusDoc) error {
		pipeline.Emit(out, schemas.Corpus, "corpus", d)
		n++
		return nil
	})
	if im.Report != nil {
		*im.Report = rep // also on failure: what was read and skipped until then
	}
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("import produced no documents (%d rows read, %d skipped)", rep.Read, rep.Skipped)
	}
	out.Stat("documents", n)
	return nil
}

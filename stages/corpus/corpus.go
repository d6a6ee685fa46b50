// Package corpus is the round-0 stage that versions the grounding corpus of
// a run (docs/method.md step 1): either the embedded default or an import.
package corpus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/spade-pipeline/spade/datasets"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// Embedded is the stage that commits the embedded default corpus at round
// 0 when a run has no imported corpus.
type Embedded struct {
	// WithPool is set by `spade pool import`, which commits the embedded
	// corpus beside the imported pool at round 0 of a run under
	// design.mode fixed_pool. Without it the stage refuses round 0 of such
	// a run: sealed without a pool, the run could never get one (an
	// Airflow DAG's round-0 tasks run before the import, for one). It is
	// not part of the fingerprint: the corpus is the same either way.
	WithPool bool
}

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
// under design.mode fixed_pool without WithPool, ErrNoPool (nothing is
// emitted); the embedded corpus does not decode (a build defect), wrapped
// as "embedded corpus".
func (e Embedded) Run(_ context.Context, env *pipeline.Env, _ int, out *pipeline.Out) error {
	fixed := env != nil && env.Config != nil && env.Config.FixedPool()
	if fixed && !e.WithPool {
		return fmt.Errorf("run %s: %w", env.Round.Run, ErrNoPool)
	}
	docs, err := datasets.Embedded()
	if err != nil {
		return fmt.Errorf("embedded corpus: %w", err)
	}
	if fixed {
		// No designer reads it: say so rather than suggest an import.
		slog.Info("design.mode fixed_pool: round 0 holds the embedded corpus, which no stage of this run reads", "documents", len(docs))
		pipeline.Emit(out, schemas.Corpus, "corpus", docs...)
		out.Stat("documents", len(docs))
		return nil
	}
	// Said out loud: a script whose `corpus import` failed would otherwise
	// go on with the wrong corpus without a word.
	slog.Info("no corpus was imported into this run: its round 0 is the embedded corpus (run `spade corpus import` first to use your own)",
		"documents", len(docs))
	pipeline.Emit(out, schemas.Corpus, "corpus", docs...)
	out.Stat("documents", len(docs))
	return nil
}

// ErrNoPool is the embedded corpus stage's error for round 0 of a run under
// design.mode fixed_pool when `spade pool import` did not run it.
var ErrNoPool = errors.New("design.mode fixed_pool: round 0 is committed by `spade pool import PATH...`, which imports the run's pool (docs/recipes.md \"Fixed-pool baselines\"); run it first")

// Import is the stage `spade corpus import` runs: it commits the documents
// the importer reads as the run's round-0 corpus. Its fingerprint covers
// what those documents depend on and nothing else: the import options
// other than the paths as typed, and InputDigests, in path order. So the
// same inputs imported from another working directory, or named by
// another spelling of their paths, give the same fingerprint.
type Import struct {
	// Options says what to import and how (paths, format, field paths).
	// All of it but Paths is part of the stage's fingerprint; Paths are
	// only read (and name files in the report).
	Options datasets.ImportOptions
	// InputDigests holds datasets.InputDigest(Options, p) for each p in
	// Options.Paths, in the same order, filled by the caller. Run fails
	// when it does not have one entry per path.
	InputDigests []string
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

// ConfigSubset implements pipeline.Stage: the options without Paths, and
// InputDigests in their place. Without one digest per path (a caller
// defect, which Run refuses) the paths stay in, as typed.
func (im *Import) ConfigSubset(*config.Config) any {
	opts := im.Options
	if len(im.InputDigests) == len(opts.Paths) {
		opts.Paths = nil
	}
	return struct {
		Options datasets.ImportOptions
		Inputs  []string
	}{opts, im.InputDigests}
}

// Parts implements pipeline.Stage: one part, and never an error.
func (*Import) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }

// Run implements pipeline.Stage: it emits every document datasets.Import
// accepts and sets *Report (also on failure). Errors: InputDigests without
// one entry per path (nothing is read); datasets.Import's, as it returns
// them (see its doc); or none imported ("import produced no documents",
// with the rows read and skipped). Nothing is committed then.
func (im *Import) Run(ctx context.Context, _ *pipeline.Env, _ int, out *pipeline.Out) error {
	if len(im.InputDigests) != len(im.Options.Paths) {
		return fmt.Errorf("corpus import: %d input digests for %d paths", len(im.InputDigests), len(im.Options.Paths))
	}
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

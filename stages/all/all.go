// Package all assembles the round's stage DAG from every stage package, in
// one place, with the engines they share (DESIGN.md "Stages and their DAG").
package all

import (
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/stages/corpus"
	"github.com/spade-pipeline/spade/stages/sample"
)

// Stages returns every stage of a run in registration order; the runner
// orders them by their table dependencies.
func Stages(cfg *config.Config, eng *Engines) []pipeline.Stage {
	return []pipeline.Stage{
		corpus.Embedded{},
		sample.Stage{},
	}
}

// Engines holds the shared engines (sandbox, model backend, trainer) that
// stages use, opened lazily on first use and closed by Close.
type Engines struct {
	Config *config.Config
}

// Close releases every engine that was opened.
func (e *Engines) Close() error { return nil }

// Package all assembles the round's stage DAG from every stage package, in
// one place (docs/design.md "Stages and their DAG"):
//
//	corpus(0)                                  [round 0, once]
//	sample(r)   <- corpus                      [regeneration rounds]
//	design(r)   <- slots(r), corpus, memory(r-1)
//	validate(r) <- designs(r)
//	hint(r)     <- environments(r)
//	rollout(r)  <- environments(r)+hints(r) | pool(r-1); checkpoints(r-1)
//	label(r)    <- rollouts(r), environments(r) | pool(r-1)
//	memory(r)   <- memory(r-1), labels(r), environments(r)
//	pool(r)     <- labels(r), environments(r), hints(r) | pool(r-1)
//	grpo(r)     <- rollouts(r), labels(r), designs(r), checkpoints(r-1)
//	metrics(r)  <- everything of round r
//	eval(r)     <- checkpoints(r)               [every eval.every rounds]
package all

import (
	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/stages/corpus"
	"github.com/spade-pipeline/spade/stages/design"
	"github.com/spade-pipeline/spade/stages/eval"
	"github.com/spade-pipeline/spade/stages/grpo"
	"github.com/spade-pipeline/spade/stages/hint"
	"github.com/spade-pipeline/spade/stages/label"
	"github.com/spade-pipeline/spade/stages/memory"
	"github.com/spade-pipeline/spade/stages/pool"
	"github.com/spade-pipeline/spade/stages/rollout"
	"github.com/spade-pipeline/spade/stages/roundmetrics"
	"github.com/spade-pipeline/spade/stages/sample"
	"github.com/spade-pipeline/spade/stages/validate"
)

// Stages returns every stage of a run in DAG order, sharing eng.
func Stages(eng *engine.Engines) []pipeline.Stage {
	return []pipeline.Stage{
		corpus.Embedded{},
		sample.Stage{},
		&design.Stage{Eng: eng},
		&validate.Stage{Eng: eng},
		&hint.Stage{Eng: eng},
		&rollout.Stage{Eng: eng},
		label.Stage{},
		memory.Stage{},
		pool.Stage{},
		&grpo.Stage{Log: eng.Log, BeforeTrain: eng.StopIdleServers},
		roundmetrics.Stage{},
		&eval.Stage{Eng: eng},
	}
}

package pipeline

import (
	"fmt"

	"github.com/spade-pipeline/spade/pipeline/config"
)

// RoundPlan is the plan of one round of a run: every stage of the stage
// set with the inputs it reads at the round, whether it runs, and the
// stages of the round it depends on, in the order the round runs them.
// It is the one derivation of a round's stage DAG: the runner runs a
// round in its order (RunRound), names the last stage of an unsealed
// round (the hint of a "not sealed" error) and seals the tables of the
// stages that run; `spade dag airflow` builds its task graph from the
// plans of round 0 and of a regeneration round; the docs' drawing of the
// DAG is checked against it (TestDagDocs). Built by PlanRound; a pure
// function of the stage set, the config and the round.
type RoundPlan struct {
	// Round is the round planned, as the stages were asked about it.
	Round RoundInfo
	// Stages holds every stage of the stage set, those that do not run at
	// the round included, in run order: each stage after every stage it
	// depends on (After, followed depth first), registration order
	// otherwise.
	Stages []PlannedStage

	// writer maps a table to the name of the stage that outputs it (the
	// last registered one when several do).
	writer map[string]string
	// index maps a stage's name to its position in Stages.
	index map[string]int
}

// PlannedStage is one stage of a RoundPlan.
type PlannedStage struct {
	// Stage is the stage itself.
	Stage Stage
	// Name is Stage.Name().
	Name string
	// Inputs are the table versions the stage reads at the round, as its
	// Plan returns them (tables of this round and of earlier ones).
	Inputs []Input
	// Runs is Plan's second result: whether the stage has work at the
	// round. A stage that does not run is still planned (and ordered), so
	// that the plan is the same whichever stages of the set run.
	Runs bool
	// After names the other stages of the set that write a table the stage
	// reads at this same round (an input whose Round is the plan's), each
	// once, in the order of the inputs that name them. Stages that do not
	// run at the round are included: they order the round all the same.
	// Inputs of earlier rounds give no dependency here; Writer of the plan
	// of their round names their writer.
	After []string
}

// PlanRound plans round ri of a run whose stages are stages (in
// registration order) under cfg: it asks each stage its Plan once and
// orders the stages so that each follows the stages whose same-round
// outputs it reads (PlannedStage.After), depth first in registration
// order. The writer of a table is the stage that outputs it, the last
// registered one when several do. Errors: a dependency cycle, "stage X:
// dependency cycle" naming a stage on the cycle; nothing else fails.
func PlanRound(stages []Stage, cfg *config.Config, ri RoundInfo) (*RoundPlan, error) {
	p := &RoundPlan{Round: ri, writer: map[string]string{}, index: map[string]int{}}
	producer := map[string]int{}
	for i, s := range stages {
		for _, o := range s.Outputs() {
			producer[o.Table] = i
			p.writer[o.Table] = s.Name()
		}
	}
	planned := make([]PlannedStage, len(stages))
	after := make([][]int, len(stages))
	for i, s := range stages {
		ins, runs := s.Plan(ri, cfg)
		ps := PlannedStage{Stage: s, Name: s.Name(), Inputs: ins, Runs: runs}
		seen := map[int]bool{}
		for _, in := range ins {
			if in.Round != ri.Round {
				continue
			}
			if j, ok := producer[in.Table]; ok && j != i && !seen[j] {
				seen[j] = true
				after[i] = append(after[i], j)
				ps.After = append(ps.After, stages[j].Name())
			}
		}
		planned[i] = ps
	}
	state := make([]int, len(stages)) // 0 new, 1 visiting, 2 done
	var visit func(i int) error
	visit = func(i int) error {
		switch state[i] {
		case 1:
			return fmt.Errorf("stage %s: dependency cycle", stages[i].Name())
		case 2:
			return nil
		}
		state[i] = 1
		for _, j := range after[i] {
			if err := visit(j); err != nil {
				return err
			}
		}
		state[i] = 2
		p.index[planned[i].Name] = len(p.Stages)
		p.Stages = append(p.Stages, planned[i])
		return nil
	}
	for i := range stages {
		if err := visit(i); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// plan is PlanRound of the runner's stages and config at round ri.
func (r *Runner) plan(ri RoundInfo) (*RoundPlan, error) {
	return PlanRound(r.Stages, &r.Config, ri)
}

// Running returns the stages that run at the round, in run order.
func (p *RoundPlan) Running() []PlannedStage {
	var out []PlannedStage
	for _, ps := range p.Stages {
		if ps.Runs {
			out = append(out, ps)
		}
	}
	return out
}

// Lookup returns the planned stage called name, and false when the stage
// set has none of that name.
func (p *RoundPlan) Lookup(name string) (PlannedStage, bool) {
	i, ok := p.index[name]
	if !ok {
		return PlannedStage{}, false
	}
	return p.Stages[i], true
}

// Runs reports whether the stage called name runs at the round (false
// for a name the stage set does not have).
func (p *RoundPlan) Runs(name string) bool {
	ps, ok := p.Lookup(name)
	return ok && ps.Runs
}

// Writer returns the name of the stage that outputs table (the last
// registered one when several do), whether or not it runs at the round,
// and false when no stage of the set outputs it.
func (p *RoundPlan) Writer(table string) (string, bool) {
	w, ok := p.writer[table]
	return w, ok
}

// NotInRoundError is RunStage's error for a stage asked to run at a round
// where it has nothing to do (the corpus stage after round 0, a generation
// stage at round 0 or between regeneration rounds). Nothing is read or
// written, and the run is not created, before it is returned.
type NotInRoundError struct {
	// Stage is the stage's name.
	Stage string
	// Round is the round asked for.
	Round int
	// Why names the rule: which rounds the stage runs at.
	Why string
}

// Error says which stage, which round and why.
func (e *NotInRoundError) Error() string {
	return fmt.Sprintf("stage %s does not run at round %d (%s)", e.Stage, e.Round, e.Why)
}

// runsAt returns a *NotInRoundError when s does not run at round ri.
func (r *Runner) runsAt(s Stage, ri RoundInfo) error {
	if _, runs := s.Plan(ri, &r.Config); runs {
		return nil
	}
	why := fmt.Sprintf("regeneration rounds are 1, 1+k, 1+2k, ... with k = %d", r.Config.RegenerateEvery)
	if r.Config.FixedPool() {
		why = "design.mode fixed_pool: no round regenerates"
	}
	if ri.Round == 0 {
		why = "round 0 holds the corpus only"
	} else if _, at0 := s.Plan(NewRoundInfo(r.Run, 0, &r.Config), &r.Config); at0 {
		why = "it runs at round 0 only"
	}
	return &NotInRoundError{Stage: s.Name(), Round: ri.Round, Why: why}
}

package pipeline_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
)

// planStage is a stage for PlanRound only: it writes outs and reads ins
// (at the planned round unless the input names round 0), running when
// runs says so.
type planStage struct {
	name string
	outs []string
	ins  []string // "table" (this round) or "table@0"
	runs func(ri pipeline.RoundInfo) bool
}

func (s planStage) Name() string { return s.name }
func (s planStage) Outputs() []pipeline.Output {
	var out []pipeline.Output
	for _, t := range s.outs {
		out = append(out, pipeline.Output{Table: t})
	}
	return out
}
func (s planStage) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	var ins []pipeline.Input
	for _, t := range s.ins {
		if name, ok := strings.CutSuffix(t, "@0"); ok {
			ins = append(ins, pipeline.Input{Table: name, Round: 0})
			continue
		}
		ins = append(ins, pipeline.Input{Table: t, Round: ri.Round})
	}
	runs := ri.Round >= 1
	if s.runs != nil {
		runs = s.runs(ri)
	}
	return ins, runs
}
func (planStage) ConfigSubset(*config.Config) any                   { return nil }
func (planStage) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }
func (planStage) Run(context.Context, *pipeline.Env, int, *pipeline.Out) error {
	return nil
}

func names(ps []pipeline.PlannedStage) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func TestPlanRoundOrder(t *testing.T) {
	cfg := config.Default()
	ri := pipeline.NewRoundInfo("r", 2, &cfg)
	setup := planStage{name: "setup", outs: []string{"corpus"}, runs: func(ri pipeline.RoundInfo) bool { return ri.Round == 0 }}
	idle := planStage{name: "idle", outs: []string{"x"}, ins: []string{"a"}, runs: func(pipeline.RoundInfo) bool { return false }}
	// Registered out of order: c reads b and x (idle's), b reads a and the
	// corpus of round 0, d reads nothing.
	stages := []pipeline.Stage{
		planStage{name: "c", outs: []string{"c"}, ins: []string{"b", "x", "b"}},
		planStage{name: "d", outs: []string{"d"}},
		setup,
		planStage{name: "b", outs: []string{"b"}, ins: []string{"a", "corpus@0", "b"}},
		idle,
		planStage{name: "a", outs: []string{"a"}},
	}
	p, err := pipeline.PlanRound(stages, &cfg, ri)
	require.NoError(t, err)
	require.Equal(t, ri, p.Round)
	// Depth first in registration order: c pulls a, b, idle in first; a
	// stage that does not run still orders the round.
	require.Equal(t, []string{"a", "b", "idle", "c", "d", "setup"}, names(p.Stages))
	require.Equal(t, []string{"a", "b", "c", "d"}, names(p.Running()))
	c, ok := p.Lookup("c")
	require.True(t, ok)
	require.Equal(t, []string{"b", "idle"}, c.After, "each once, in input order, idle stages included")
	b, _ := p.Lookup("b")
	require.Equal(t, []string{"a"}, b.After, "round-0 inputs and the stage's own table give no dependency")
	require.Len(t, b.Inputs, 3)
	require.True(t, p.Runs("a"))
	require.False(t, p.Runs("idle"))
	require.False(t, p.Runs("nope"))
	_, ok = p.Lookup("nope")
	require.False(t, ok)
	w, ok := p.Writer("corpus")
	require.True(t, ok)
	require.Equal(t, "setup", w)
	_, ok = p.Writer("nope")
	require.False(t, ok)

	p0, err := pipeline.PlanRound(stages, &cfg, pipeline.NewRoundInfo("r", 0, &cfg))
	require.NoError(t, err)
	require.Equal(t, []string{"setup"}, names(p0.Running()))
}

func TestPlanRoundCycle(t *testing.T) {
	cfg := config.Default()
	stages := []pipeline.Stage{
		planStage{name: "a", outs: []string{"a"}, ins: []string{"b"}},
		planStage{name: "b", outs: []string{"b"}, ins: []string{"a"}},
	}
	_, err := pipeline.PlanRound(stages, &cfg, pipeline.NewRoundInfo("r", 1, &cfg))
	require.EqualError(t, err, "stage a: dependency cycle")
	// A cycle through the round-0 input of an earlier round is none.
	stages[1] = planStage{name: "b", outs: []string{"b"}, ins: []string{"a@0"}}
	_, err = pipeline.PlanRound(stages, &cfg, pipeline.NewRoundInfo("r", 1, &cfg))
	require.NoError(t, err)
}

// TestRunRoundFollowsThePlan: RunRound runs the stages that run, in the
// plan's order.
func TestRunRoundFollowsThePlan(t *testing.T) {
	st := memStore(t)
	r := newRunner(t, st, "plan", &gen{parts: 2, rows: 10, failPart: -1})
	_, err := r.RunRound(context.Background(), 0)
	require.NoError(t, err)
	res, err := r.RunRound(context.Background(), 1)
	require.NoError(t, err)
	p, err := pipeline.PlanRound(r.Stages, &r.Config, pipeline.NewRoundInfo("plan", 1, &r.Config))
	require.NoError(t, err)
	require.Equal(t, names(p.Running()), res.Ran)
	require.Equal(t, []string{"gen", "sum"}, res.Ran)
}

// Package validate is the validation stage (docs/method.md step 4 plus the
// project's own checks, docs/environment-contract.md): every slot's final
// attempt is validated in the sandbox; every check is a row of validations
// and every candidate a row of environments, valid or not.
package validate

import (
	"context"
	"encoding/json"
	"sort"

	"github.com/sourcegraph/conc/pool"

	"github.com/spade-pipeline/spade/engines/action"
	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/engines/envcheck"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// EnvsPerPart is the unit of sharded validation work: the number of
// candidate environments (final attempts with code, one per env_id) each
// part validates.
const EnvsPerPart = 8

// Stage is the validate stage; it runs on regeneration rounds.
type Stage struct {
	// Eng provides the shared sandbox (required).
	Eng *engine.Engines
}

// Name implements pipeline.Stage.
func (*Stage) Name() string { return "validate" }

// Outputs implements pipeline.Stage.
func (*Stage) Outputs() []pipeline.Output {
	return []pipeline.Output{{Table: "validations"}, {Table: "environments"}}
}

// Plan implements pipeline.Stage.
func (*Stage) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	return []pipeline.Input{{Table: "designs", Round: ri.Round}, {Table: "slots", Round: ri.Round}}, ri.Round >= 1 && ri.Regeneration
}

// ConfigSubset implements pipeline.Stage.
// rollout.action_format is part of it: under valid_actions the check
// actions_line runs.
func (*Stage) ConfigSubset(c *config.Config) any {
	return struct {
		Sandbox      config.Sandbox
		ActionFormat string
	}{c.Sandbox, c.Rollout.ActionFormat}
}

// candidates returns the final attempts that produced code, one per env_id
// (the first slot keeps a source two slots produced), sorted by slot.
func candidates(ctx context.Context, env *pipeline.Env) ([]schemas.Design, map[string]schemas.Slot, error) {
	designs, err := pipeline.ReadAll(ctx, env, schemas.Designs, "designs", env.Round.Round)
	if err != nil {
		return nil, nil, err
	}
	slots, err := pipeline.ReadAll(ctx, env, schemas.Slots, "slots", env.Round.Round)
	if err != nil {
		return nil, nil, err
	}
	bySlot := map[string]schemas.Slot{}
	for _, s := range slots {
		bySlot[s.SlotID] = s
	}
	sort.Slice(designs, func(a, b int) bool {
		if designs[a].SlotID != designs[b].SlotID {
			return designs[a].SlotID < designs[b].SlotID
		}
		return designs[a].Attempt < designs[b].Attempt
	})
	seen := map[string]bool{}
	var out []schemas.Design
	for _, d := range designs {
		if !d.Final || d.Source == "" || seen[d.EnvID] {
			continue
		}
		seen[d.EnvID] = true
		out = append(out, d)
	}
	return out, bySlot, nil
}

// Parts implements pipeline.Stage.Parts: one part per EnvsPerPart
// candidates (at least one). It reads designs and slots to count them, so
// its errors are those of reading them (pipeline.ReadAll: the store's
// error, pipeline.ErrIntegrity, table.ErrCorrupt, a schema mismatch),
// returned unwrapped.
func (*Stage) Parts(ctx context.Context, env *pipeline.Env) (int, error) {
	c, _, err := candidates(ctx, env)
	if err != nil {
		return 0, err
	}
	return max(1, (len(c)+EnvsPerPart-1)/EnvsPerPart), nil
}

// Run implements pipeline.Stage.Run: it validates the part's candidates.
// A candidate that fails a check is an environments row with Valid false
// and its reason, not an error. Errors returned: those of Parts (reading
// designs and slots); engine.Engines.Sandbox's ("sandbox: ..."); and
// ctx.Err() when ctx is cancelled during the checks.
func (s *Stage) Run(ctx context.Context, env *pipeline.Env, part int, out *pipeline.Out) error {
	designs, slots, err := candidates(ctx, env)
	if err != nil {
		return err
	}
	designs = designs[min(len(designs), part*EnvsPerPart):min(len(designs), (part+1)*EnvsPerPart)]
	cands := make([]Candidate, len(designs))
	for i, d := range designs {
		cands[i] = Candidate{EnvID: d.EnvID, SlotID: d.SlotID, Skill: d.Skill, Setting: d.Setting, Kind: d.Kind, DocIDs: slots[d.SlotID].DocIDs, Source: d.Source}
	}
	reports, err := Validate(ctx, s.Eng, env.Config, cands)
	if err != nil {
		return err
	}
	for i, c := range cands {
		Emit(out, env.Config, c, reports[i])
	}
	return nil
}

// Candidate is one environment program to validate and the identity its
// environments row carries: a designed environment's final attempt (the
// validate stage) or an imported one (`spade pool import`, package pool).
type Candidate struct {
	// EnvID is the hash of the normalised source (prompt.EnvID).
	EnvID string
	// SlotID names where the source came from: the design slot, or the
	// import's id of the file or row.
	SlotID string
	// Skill, Setting ("game" or "tool_use") and Kind (the prompt kind, or
	// "imported") are copied to the environments row.
	Skill, Setting, Kind string
	// DocIDs are the grounding documents (corpus.doc_id), in order; nil
	// for imported environments.
	DocIDs []string
	// Source is the Python program.
	Source string
}

// Validate runs the full validation (envcheck.Check) of every candidate in
// eng's shared sandbox, at most eng.Workers() at once, with the checks cfg
// selects (rollout.action_format valid_actions adds actions_line), and
// returns the reports in the order of cands. A candidate that fails a
// check has a report with Valid false and its reason, not an error.
// Errors: engine.Engines.Sandbox's ("sandbox: ..."), and ctx.Err() when
// ctx is cancelled during the checks.
func Validate(ctx context.Context, eng *engine.Engines, cfg *config.Config, cands []Candidate) ([]envcheck.Report, error) {
	sb, err := eng.Sandbox()
	if err != nil {
		return nil, err
	}
	reports := make([]envcheck.Report, len(cands))
	wp := pool.New().WithContext(ctx).WithMaxGoroutines(eng.Workers())
	for i, c := range cands {
		wp.Go(func(ctx context.Context) error {
			reports[i] = envcheck.Check(ctx, sb, c.Source, envcheck.Options{ActionsLine: cfg.Rollout.ActionFormat == action.FormatValidActions})
			return ctx.Err()
		})
	}
	if err := wp.Wait(); err != nil {
		return nil, err
	}
	return reports, nil
}

// Emit writes candidate c validated as rep to out: one validations row per
// check (Seq numbering them in the report's order; ms only with
// observe.timings) and its environments row, valid or not, which it also
// returns. out must declare the tables "validations" and "environments".
func Emit(out *pipeline.Out, cfg *config.Config, c Candidate, rep envcheck.Report) schemas.Environment {
	for seq, ch := range rep.Checks {
		v := schemas.Validation{EnvID: c.EnvID, SlotID: c.SlotID, Seq: int64(seq), Check: ch.Name, Passed: ch.Passed, Skipped: ch.Skipped, Detail: ch.Detail, TracebackTail: ch.TracebackTail}
		if cfg.Observe.Timings {
			ms := ch.Duration.Milliseconds()
			v.MS = &ms
		}
		pipeline.Emit(out, schemas.Validations, "validations", v)
	}
	e := environmentRow(c, rep)
	pipeline.Emit(out, schemas.Environments, "environments", e)
	return e
}

// environmentRow is the environments row of candidate c validated as rep.
// Tools is non-empty exactly when EnvKind is "tool_use": the compact JSON of
// the class's tools attribute, or "null" when a tool-use class sets it to
// None. The pool table carries tools but not env_kind, so the rollout stage
// tells a tool-use environment by its tools, on every round.
func environmentRow(c Candidate, rep envcheck.Report) schemas.Environment {
	e := schemas.Environment{
		EnvID: c.EnvID, SlotID: c.SlotID, Skill: c.Skill, Setting: c.Setting, Kind: c.Kind,
		DocIDs: c.DocIDs, Source: c.Source, Valid: rep.Valid, Reason: rep.Reason, EnvKind: rep.Kind,
		RewardLow: 0, RewardHigh: 1,
	}
	if m := rep.Meta; m != nil {
		e.Name, e.MaxTurns = m.Name, int64(m.MaxTurns)
		if len(m.RewardRange) == 2 {
			e.RewardLow, e.RewardHigh = m.RewardRange[0], m.RewardRange[1]
		}
		if len(m.Tools) > 0 {
			var compact any
			if json.Unmarshal(m.Tools, &compact) == nil {
				b, _ := json.Marshal(compact)
				e.Tools = string(b)
			}
		}
	}
	if e.EnvKind == "tool_use" && e.Tools == "" {
		e.Tools = "null"
	}
	if !rep.Valid {
		// Non-finite bounds of an invalid environment must not reach
		// Parquet statistics or later arithmetic.
		e.RewardLow, e.RewardHigh = 0, 1
	}
	return e
}

// Package validate is the validation stage (SPADE.md step 4 plus the
// project's own checks, docs/environment-contract.md): every slot's final
// attempt is validated in the sandbox; every check is a row of validations
// and every candidate a row of environments, valid or not.
package validate

import (
	"context"
	"encoding/json"
	"sort"

	"github.com/sourcegraph/conc/pool"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/stages/engine"
	"github.com/spade-pipeline/spade/stages/envcheck"
	"github.com/spade-pipeline/spade/stages/rollout/action"
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
	cands, slots, err := candidates(ctx, env)
	if err != nil {
		return err
	}
	cands = cands[min(len(cands), part*EnvsPerPart):min(len(cands), (part+1)*EnvsPerPart)]
	sb, err := s.Eng.Sandbox()
	if err != nil {
		return err
	}
	reports := make([]envcheck.Report, len(cands))
	wp := pool.New().WithContext(ctx).WithMaxGoroutines(s.Eng.Workers())
	for i, d := range cands {
		wp.Go(func(ctx context.Context) error {
			reports[i] = envcheck.Check(ctx, sb, d.Source, envcheck.Options{ActionsLine: env.Config.Rollout.ActionFormat == action.FormatValidActions})
			return ctx.Err()
		})
	}
	if err := wp.Wait(); err != nil {
		return err
	}
	for i, d := range cands {
		rep := reports[i]
		for seq, c := range rep.Checks {
			v := schemas.Validation{EnvID: d.EnvID, SlotID: d.SlotID, Seq: int64(seq), Check: c.Name, Passed: c.Passed, Skipped: c.Skipped, Detail: c.Detail, TracebackTail: c.TracebackTail}
			if env.Config.Observe.Timings {
				ms := c.Duration.Milliseconds()
				v.MS = &ms
			}
			pipeline.Emit(out, schemas.Validations, "validations", v)
		}
		e := environmentRow(d, slots[d.SlotID], rep)
		pipeline.Emit(out, schemas.Environments, "environments", e)
	}
	return nil
}

// environmentRow is the environments row of candidate d validated as rep.
// Tools is non-empty exactly when EnvKind is "tool_use": the compact JSON of
// the class's tools attribute, or "null" when a tool-use class sets it to
// None. The pool table carries tools but not env_kind, so the rollout stage
// tells a tool-use environment by its tools, on every round.
func environmentRow(d schemas.Design, slot schemas.Slot, rep envcheck.Report) schemas.Environment {
	e := schemas.Environment{
		EnvID: d.EnvID, SlotID: d.SlotID, Skill: d.Skill, Setting: d.Setting, Kind: d.Kind,
		DocIDs: slot.DocIDs, Source: d.Source, Valid: rep.Valid, Reason: rep.Reason, EnvKind: rep.Kind,
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

package validate

import (
	"context"

	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/engines/poolimport"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// PoolImport is the stage `spade pool import` runs at round 0 of a run under
// design.mode fixed_pool: it validates every entry as the validate stage
// validates a designed environment (Validate and Emit:
// the same checks, sandbox and rows) and commits the validations, the
// environments (valid or not, with the reason) and the pool (the valid
// ones, with no hint and admitted_round 0), which every round of the run
// then plays. Its fingerprint covers the entries' content (Digest), the
// default skill and the validation settings, not the paths.
type PoolImport struct {
	// Eng provides the sandbox (required).
	Eng *engine.Engines
	// Entries are the environments to import (poolimport.Read's), in order.
	Entries []poolimport.Entry
	// Skill is poolimport.Options.Skill: the skill of entries whose row and
	// class name none ("" means DefaultSkill).
	Skill string
}

// Name implements pipeline.Stage.
func (*PoolImport) Name() string { return "pool_import" }

// Outputs implements pipeline.Stage: the validate stage's tables and the
// pool's.
func (*PoolImport) Outputs() []pipeline.Output {
	return []pipeline.Output{{Table: "validations"}, {Table: "environments"}, {Table: "pool"}}
}

// Plan implements pipeline.Stage: round 0 only, reading nothing.
func (*PoolImport) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	return nil, ri.Round == 0
}

// ConfigSubset implements pipeline.Stage: the entries' digest, the default
// skill and the validate stage's settings.
func (im *PoolImport) ConfigSubset(c *config.Config) any {
	return struct {
		Entries  string
		Skill    string
		Validate any
	}{poolimport.Digest(im.Entries), im.skill(), (&Stage{}).ConfigSubset(c)}
}

func (im *PoolImport) skill() string {
	if im.Skill == "" {
		return poolimport.DefaultSkill
	}
	return im.Skill
}

// Parts implements pipeline.Stage: one part per poolimport.EnvsPerPart entries;
// never an error.
func (im *PoolImport) Parts(context.Context, *pipeline.Env) (int, error) {
	return max(1, (len(im.Entries)+poolimport.EnvsPerPart-1)/poolimport.EnvsPerPart), nil
}

// Run implements pipeline.Stage: it validates the part's entries and emits
// their rows. An entry's skill is its row's, else its class's skill
// attribute, else the default; its setting is "tool_use" for a
// spade_env.ToolUseEnv class, else "game"; its kind poolimport.KindImported and its
// slot_id its ID. Errors: Validate's (the sandbox's, ctx.Err()).
func (im *PoolImport) Run(ctx context.Context, env *pipeline.Env, part int, out *pipeline.Out) error {
	ents := im.Entries[min(len(im.Entries), part*poolimport.EnvsPerPart):min(len(im.Entries), (part+1)*poolimport.EnvsPerPart)]
	cands := make([]Candidate, len(ents))
	for i, e := range ents {
		cands[i] = Candidate{EnvID: e.EnvID, SlotID: e.ID, Kind: poolimport.KindImported, Source: e.Source}
	}
	reports, err := Validate(ctx, im.Eng, env.Config, cands)
	if err != nil {
		return err
	}
	for i, c := range cands {
		rep := reports[i]
		c.Skill = ents[i].Skill
		if c.Skill == "" && rep.Meta != nil {
			c.Skill = rep.Meta.Skill
		}
		if c.Skill == "" {
			c.Skill = im.skill()
		}
		c.Setting = "game"
		if rep.Kind == "tool_use" {
			c.Setting = "tool_use"
		}
		e := Emit(out, env.Config, c, rep)
		if e.Valid {
			pipeline.Emit(out, schemas.Pool, "pool", schemas.PoolEnv{
				EnvID: e.EnvID, SlotID: e.SlotID, Skill: e.Skill, Setting: e.Setting, Kind: e.Kind,
				Source: e.Source, MaxTurns: e.MaxTurns, Tools: e.Tools, AdmittedRound: 0,
			})
		}
	}
	return nil
}

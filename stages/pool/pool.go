// Package pool is the pool stage (docs/method.md step 8): the training pool is
// replaced at each regeneration by the admitted environments (inside the
// learnable band), and carried forward by reference between regenerations.
// It also holds the fixed-pool baseline's pieces (design.mode fixed_pool,
// docs/recipes.md "Fixed-pool baselines"): ReadImport and the Import stage
// of `spade pool import`, which commit an imported pool at round 0, and
// Draw, the environments of that pool a round plays.
package pool

import (
	"context"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// Stage is the pool stage; it runs every round.
type Stage struct{}

// Name implements pipeline.Stage.
func (Stage) Name() string { return "pool" }

// Outputs implements pipeline.Stage.
func (Stage) Outputs() []pipeline.Output { return []pipeline.Output{{Table: "pool"}} }

// Plan implements pipeline.Stage.
func (Stage) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	if ri.Round < 1 {
		return nil, false
	}
	if !ri.Regeneration {
		return []pipeline.Input{{Table: "pool", Round: ri.Round - 1}}, true
	}
	return []pipeline.Input{{Table: "labels", Round: ri.Round}, {Table: "environments", Round: ri.Round}, {Table: "hints", Round: ri.Round}}, true
}

// ConfigSubset implements pipeline.Stage.
func (Stage) ConfigSubset(*config.Config) any { return nil }

// Parts implements pipeline.Stage.Parts: the stage is one part, and its
// error is always nil.
func (Stage) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }

// Run implements pipeline.Stage.Run. Between regenerations it references
// pool(r-1) and returns nil without reading anything. On a regeneration
// round its only errors are those of reading labels, environments and
// hints (pipeline.ReadAll: the store's error, pipeline.ErrIntegrity,
// table.ErrCorrupt, a schema mismatch), returned unwrapped; an admitted
// environment without a hints row gets an empty hint.
func (Stage) Run(ctx context.Context, env *pipeline.Env, _ int, out *pipeline.Out) error {
	ri := env.Round
	if !ri.Regeneration {
		out.Reference("pool", env.Manifest("pool", ri.Round-1))
		return nil
	}
	labels, err := pipeline.ReadAll(ctx, env, schemas.Labels, "labels", ri.Round)
	if err != nil {
		return err
	}
	envs, err := pipeline.ReadAll(ctx, env, schemas.Environments, "environments", ri.Round)
	if err != nil {
		return err
	}
	hints, err := pipeline.ReadAll(ctx, env, schemas.Hints, "hints", ri.Round)
	if err != nil {
		return err
	}
	admitted := map[string]bool{}
	for _, l := range labels {
		if l.Admitted {
			admitted[l.EnvID] = true
		}
	}
	hint := map[string]string{}
	for _, h := range hints {
		hint[h.EnvID] = h.Hint
	}
	n := 0
	for _, e := range envs {
		if !admitted[e.EnvID] {
			continue
		}
		n++
		pipeline.Emit(out, schemas.Pool, "pool", schemas.PoolEnv{
			EnvID: e.EnvID, SlotID: e.SlotID, Skill: e.Skill, Setting: e.Setting, Kind: e.Kind,
			Source: e.Source, Hint: hint[e.EnvID], MaxTurns: e.MaxTurns, Tools: e.Tools, AdmittedRound: int64(ri.Round),
		})
	}
	out.Stat("pool_size", n)
	return nil
}

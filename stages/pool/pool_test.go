package pool_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	_ "github.com/spade-pipeline/spade/pipeline/storage/memstore"
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/stages/pool"
)

// fixture writes the pool stage's regeneration inputs (labels,
// environments, hints) on regeneration rounds, as label, validate and hint
// would.
type fixture struct {
	labels []schemas.Label
	envs   []schemas.Environment
	hints  []schemas.Hint
}

func (*fixture) Name() string { return "fixture" }
func (*fixture) Outputs() []pipeline.Output {
	return []pipeline.Output{{Table: "labels"}, {Table: "environments"}, {Table: "hints"}}
}
func (*fixture) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	return nil, ri.Round >= 1 && ri.Regeneration
}
func (*fixture) ConfigSubset(*config.Config) any                   { return nil }
func (*fixture) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }
func (f *fixture) Run(_ context.Context, env *pipeline.Env, _ int, out *pipeline.Out) error {
	// Distinct rows per regeneration: env ids carry the round.
	tag := func(id string) string { return id + "@" + string(rune('0'+env.Round.Round)) }
	for _, l := range f.labels {
		l.EnvID = tag(l.EnvID)
		pipeline.Emit(out, schemas.Labels, "labels", l)
	}
	for _, e := range f.envs {
		e.EnvID = tag(e.EnvID)
		pipeline.Emit(out, schemas.Environments, "environments", e)
	}
	for _, h := range f.hints {
		h.EnvID = tag(h.EnvID)
		pipeline.Emit(out, schemas.Hints, "hints", h)
	}
	return nil
}

func readTable[T any](t *testing.T, st storage.Store, tbl schemas.Table[T], run string, round int) ([]T, *pipeline.Manifest) {
	t.Helper()
	ctx := context.Background()
	m, err := pipeline.ReadManifest(ctx, st, pipeline.ManifestKey(run, round, tbl.Name))
	require.NoError(t, err)
	rows, err := pipeline.ReadManifestRows(ctx, st, tbl, m)
	require.NoError(t, err)
	return rows, m
}

// TestPoolAdmittedOnly runs the pool stage through the runner for a
// regeneration round and the rounds after it: the pool holds exactly the
// admitted environments (with their hints and admission round), and
// between regenerations it is carried forward by reference (same files).
func TestPoolAdmittedOnly(t *testing.T) {
	ctx := context.Background()
	st, err := storage.Open(ctx, "mem://"+strings.ReplaceAll(t.Name(), "/", "_"))
	require.NoError(t, err)
	f := &fixture{
		labels: []schemas.Label{
			{EnvID: "a", Valid: true, WinRate: 0.5, Learnable: true, Admitted: true},
			{EnvID: "b", Valid: true, WinRate: 1, Learnable: false, Admitted: false},
			{EnvID: "c", Valid: false, Admitted: false},
			{EnvID: "d", Valid: true, WinRate: 0.2, Learnable: true, Admitted: true},
			// A label without an environment row cannot enter the pool.
			{EnvID: "ghost", Valid: true, WinRate: 0.5, Learnable: true, Admitted: true},
		},
		envs: []schemas.Environment{
			{EnvID: "a", SlotID: "s0", Skill: "planning", Setting: "game", Kind: "game", Source: "src a", Valid: true, MaxTurns: 9},
			{EnvID: "b", SlotID: "s1", Skill: "planning", Setting: "game", Kind: "grounded", Source: "src b", Valid: true},
			{EnvID: "c", SlotID: "s2", Skill: "spatial", Setting: "game", Kind: "game", Source: "src c", Valid: false},
			{EnvID: "d", SlotID: "s3", Skill: "spatial", Setting: "tool_use", Kind: "tooluse", Source: "src d", Valid: true, Tools: `[{"name":"t"}]`, MaxTurns: 12},
		},
		hints: []schemas.Hint{{EnvID: "a", Hint: "hint a"}, {EnvID: "b", Hint: "hint b"}, {EnvID: "d", Hint: "hint d"}},
	}
	cfg := config.Default()
	cfg.RegenerateEvery = 2
	r := &pipeline.Runner{Store: st, Run: "p", Config: cfg, Stages: []pipeline.Stage{pool.Stage{}, f}}
	for round := 0; round <= 4; round++ {
		_, err := r.RunRound(ctx, round)
		require.NoError(t, err, "round %d", round)
	}

	for _, tc := range []struct {
		round int
		regen int // the regeneration round whose pool is in force
	}{{1, 1}, {2, 1}, {3, 3}, {4, 3}} {
		t.Run("round "+string(rune('0'+tc.round)), func(t *testing.T) {
			rows, m := readTable(t, st, schemas.Pool, "p", tc.round)
			tag := "@" + string(rune('0'+tc.regen))
			want := []schemas.PoolEnv{
				{EnvID: "a" + tag, SlotID: "s0", Skill: "planning", Setting: "game", Kind: "game", Source: "src a", Hint: "hint a", MaxTurns: 9, AdmittedRound: int64(tc.regen)},
				{EnvID: "d" + tag, SlotID: "s3", Skill: "spatial", Setting: "tool_use", Kind: "tooluse", Source: "src d", Hint: "hint d", MaxTurns: 12, Tools: `[{"name":"t"}]`, AdmittedRound: int64(tc.regen)},
			}
			require.Equal(t, want, rows)
			if tc.round == tc.regen {
				require.Empty(t, m.ReferenceOf, "a regeneration round writes its own pool")
				return
			}
			_, prev := readTable(t, st, schemas.Pool, "p", tc.round-1)
			require.Equal(t, pipeline.ManifestKey("p", tc.regen, "pool"), m.ReferenceOf, "carried by reference to the regeneration's pool")
			require.Equal(t, prev.Files, m.Files, "by reference: the same files, not copies")
		})
	}
}

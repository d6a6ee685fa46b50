package roundmetrics_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/memstore"
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/stages/roundmetrics"
)

// round holds the rows the fixture writes at one round.
type round struct {
	rollouts []schemas.Rollout
	labels   []schemas.Label
	pool     []schemas.PoolEnv
	train    []schemas.TrainSample
	slots    []schemas.Slot
	designs  []schemas.Design
	envs     []schemas.Environment
}

// fixture writes the metrics stage's inputs at every round >= 1, as the
// rollout, label, pool, grpo, sample, design and validate stages would.
type fixture struct{ rounds map[int]round }

func (*fixture) Name() string { return "fixture" }
func (*fixture) Outputs() []pipeline.Output {
	return []pipeline.Output{{Table: "rollouts"}, {Table: "labels"}, {Table: "pool"}, {Table: "train_batch"},
		{Table: "slots"}, {Table: "designs"}, {Table: "environments"}}
}
func (*fixture) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	return nil, ri.Round >= 1
}
func (*fixture) ConfigSubset(*config.Config) any                   { return nil }
func (*fixture) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }
func (f *fixture) Run(_ context.Context, env *pipeline.Env, _ int, out *pipeline.Out) error {
	r := f.rounds[env.Round.Round]
	pipeline.Emit(out, schemas.Rollouts, "rollouts", r.rollouts...)
	pipeline.Emit(out, schemas.Labels, "labels", r.labels...)
	pipeline.Emit(out, schemas.Pool, "pool", r.pool...)
	pipeline.Emit(out, schemas.TrainBatch, "train_batch", r.train...)
	pipeline.Emit(out, schemas.Slots, "slots", r.slots...)
	pipeline.Emit(out, schemas.Designs, "designs", r.designs...)
	pipeline.Emit(out, schemas.Environments, "environments", r.envs...)
	return nil
}

// memoryFixture writes n memory entries at round 1 only, so that the
// metrics stage finds its optional memory input at round 1 and not at
// round 2.
type memoryFixture struct{ n int }

func (*memoryFixture) Name() string { return "memory-fixture" }
func (*memoryFixture) Outputs() []pipeline.Output {
	return []pipeline.Output{{Table: "memory"}}
}
func (*memoryFixture) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	return nil, ri.Round == 1
}
func (*memoryFixture) ConfigSubset(*config.Config) any                   { return nil }
func (*memoryFixture) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }
func (f *memoryFixture) Run(_ context.Context, _ *pipeline.Env, _ int, out *pipeline.Out) error {
	for i := 0; i < f.n; i++ {
		pipeline.Emit(out, schemas.Memory, "memory", schemas.MemoryEntry{Seq: int64(i), EnvID: "m"})
	}
	return nil
}

func ptr(v float64) *float64 { return &v }

// metricsOf reads round r's metrics table as name -> value (round-wide
// rows) and skill -> value (skill_win_rate rows).
func metricsOf(t *testing.T, st storage.Store, run string, r int) (map[string]float64, map[string]float64, []schemas.Metric) {
	t.Helper()
	ctx := context.Background()
	m, err := pipeline.ReadManifest(ctx, st, pipeline.ManifestKey(run, r, "metrics"))
	require.NoError(t, err)
	rows, err := pipeline.ReadManifestRows(ctx, st, schemas.Metrics, m)
	require.NoError(t, err)
	all, skill := map[string]float64{}, map[string]float64{}
	for _, row := range rows {
		if row.Skill != "" {
			require.Equal(t, roundmetrics.SkillWinRate, row.Name, "only skill_win_rate rows carry a skill")
			skill[row.Skill] = row.Value
			continue
		}
		_, dup := all[row.Name]
		require.False(t, dup, "metric %s written twice", row.Name)
		all[row.Name] = row.Value
	}
	return all, skill, rows
}

// TestRoundMetrics runs the metrics stage through the runner on a
// regeneration round (1) and the round after it (2, regenerate_every 2)
// over small hand-made input tables, and checks every metric against
// values worked out by hand. The learnable band is set to [0.25, 0.75]
// (not the default [0.2, 0.8]) and one environment has win rate 0.2, so a
// stage that ignored label.band_low would count it.
// roundMetricsFixture is TestRoundMetrics' two rounds of input tables (a
// regeneration round 1, a plain round 2); a function of its own to keep
// the test short.
func roundMetricsFixture() *fixture {
	const src = "class Env:\n    pass\n"
	valid := func(id string, win float64, plays int64, regret *float64, admitted bool, skill string) schemas.Label {
		return schemas.Label{EnvID: id, Skill: skill, Valid: true, Plays: plays, WinRate: win, Regret: regret, Admitted: admitted}
	}
	play := func(id string, hinted bool, sample int64, errText string, rewards ...float64) schemas.Rollout {
		return schemas.Rollout{EnvID: id, Hinted: hinted, Sample: sample, StepRewards: rewards, Error: errText}
	}
	slot := func(i int, domains ...string) schemas.Slot {
		return schemas.Slot{SlotID: "r000001-s000" + string(rune('0'+i)), Index: int64(i), Domains: domains}
	}
	design := func(slotIdx, attempt int, errText, source string) schemas.Design {
		return schemas.Design{SlotID: "r000001-s000" + string(rune('0'+slotIdx)), Attempt: int64(attempt), Error: errText, Source: source}
	}
	return &fixture{rounds: map[int]round{
		1: {
			rollouts: []schemas.Rollout{
				// a: rewards {0, 1}: 2 levels.
				play("a", false, 0, "", 0, 1), play("a", false, 1, "", 0, 0), play("a", true, 0, "", 1),
				// b: 0.1+0.2 and 0.3 are one level at 1e-6, -0 and 0 another: 2 levels.
				play("b", false, 0, "", 0.1+0.2), play("b", false, 1, "", 0.3), play("b", false, 2, "env step: timeout", math.Copysign(0, -1)),
				play("b", true, 0, "", 0),
				// c: 3 levels.
				play("c", false, 0, "", 0.25, 0.5, 0.75),
			},
			labels: []schemas.Label{
				valid("a", 0.25, 8, ptr(0.5), true, "planning"),
				valid("b", 0.75, 8, ptr(-0.25), true, "planning"),
				valid("c", 1.0, 8, ptr(0), false, "spatial"),
				valid("d", 0.2, 8, ptr(1.0), false, "spatial"),
				valid("e", 0.5, 8, ptr(0.25), true, "logic"),
				// Not played environments: left out of every mean.
				{EnvID: "x", Skill: "logic", Valid: false},
				valid("y", 0, 0, nil, false, "logic"),
			},
			pool:  []schemas.PoolEnv{{EnvID: "a"}, {EnvID: "b"}, {EnvID: "e"}},
			train: []schemas.TrainSample{{SampleID: "s1"}, {SampleID: "s2"}, {SampleID: "s3"}, {SampleID: "s4"}, {SampleID: "s5"}},
			slots: []schemas.Slot{
				slot(0, "cs.AI cs.LG"), slot(1, "math.CO"), slot(2, "Computer Science"), slot(3, "hep-th"),
				slot(4), slot(5), slot(6), slot(7),
			},
			designs: []schemas.Design{
				design(0, 0, "", src), design(1, 0, "", src), design(2, 0, "", src),
				design(3, 0, "model: HTTP 500", ""), design(3, 1, "", src),
				design(4, 0, "quick check reset: boom", src), design(4, 1, "", src),
				design(5, 0, "", ""), // no error but no source: not counted
				design(6, 0, "", src), design(7, 0, "extract: no code block", ""),
			},
			envs: []schemas.Environment{
				{EnvID: "a", Source: src, Valid: true}, {EnvID: "b", Source: src, Valid: true},
				{EnvID: "c", Source: src, Valid: true}, {EnvID: "d", Source: src, Valid: true},
				{EnvID: "e", Source: src, Valid: true}, {EnvID: "y", Source: src, Valid: true},
				{EnvID: "x", Source: "class Broken:\n", Valid: false, Reason: "reset"},
			},
		},
		2: {
			rollouts: []schemas.Rollout{play("a", false, 0, "", 1), play("b", false, 0, "", 0)},
			labels: []schemas.Label{
				valid("a", 0.5, 4, nil, true, "planning"),
				valid("b", 1.0, 4, nil, true, "planning"),
				valid("e", 0, 0, nil, true, "logic"), // in the pool, not played this round
			},
			pool:  []schemas.PoolEnv{{EnvID: "a"}, {EnvID: "b"}, {EnvID: "e"}},
			train: []schemas.TrainSample{{SampleID: "s1"}, {SampleID: "s2"}},
		},
	}}
}

func TestRoundMetrics(t *testing.T) {
	ctx := context.Background()
	f := roundMetricsFixture()

	name := "roundmetrics-test"
	t.Cleanup(func() { memstore.Forget(name) })
	st, err := storage.Open(ctx, "mem://"+name)
	require.NoError(t, err)
	cfg := config.Default()
	cfg.RegenerateEvery = 2
	cfg.Label.BandLow, cfg.Label.BandHigh = 0.25, 0.75
	r := &pipeline.Runner{Store: st, Run: "m", Config: cfg, Stages: []pipeline.Stage{roundmetrics.Stage{}, f, &memoryFixture{n: 4}}}
	for rnd := 0; rnd <= 2; rnd++ {
		_, err := r.RunRound(ctx, rnd)
		require.NoError(t, err, "round %d", rnd)
	}

	t.Run("regeneration round", func(t *testing.T) {
		got, skill, rows := metricsOf(t, st, "m", 1)
		// Regrets of the played environments, sorted: -0.25, 0, 0.25, 0.5, 1.
		// Type-7 quantiles with N = 5: h = 4q.
		want := map[string]float64{
			roundmetrics.Plays:      8,
			roundmetrics.PlayErrors: 1,
			roundmetrics.Played:     5, // a..e; x is invalid, y has no plays
			roundmetrics.Admitted:   3, // a, b, e
			// In [0.25, 0.75]: a (0.25), b (0.75), e (0.5); not c (1.0), d (0.2).
			roundmetrics.LearnableFraction: 3.0 / 5,
			roundmetrics.WinRate:           (0.25 + 0.75 + 1.0 + 0.2 + 0.5) / 5,
			roundmetrics.RegretMean:        (-0.25 + 0 + 0.25 + 0.5 + 1) / 5,
			roundmetrics.RegretP10:         -0.25 + 0.4*(0-(-0.25)), // h = 0.4
			roundmetrics.RegretP50:         0.25,                    // h = 2
			roundmetrics.RegretP90:         0.5 + 0.6*(1-0.5),       // h = 3.6
			roundmetrics.RewardLevels:      (2.0 + 2 + 3) / 3,
			roundmetrics.MemorySize:        4,
			roundmetrics.PoolSize:          3,
			roundmetrics.TrainSamples:      5,
			roundmetrics.Slots:             8,
			roundmetrics.DesignAttempts:    10,
			// Empty error and a source: 0/0, 1/0, 2/0, 3/1, 4/1, 6/0.
			roundmetrics.RawValidity:   6.0 / 10,
			roundmetrics.Candidates:    7,
			roundmetrics.Valid:         6,
			roundmetrics.ValidityRate:  6.0 / 8,
			roundmetrics.AdmissionRate: 3.0 / 6,
			// Six identical sources: Vendi score 1, divided by n = 6.
			roundmetrics.VendiPerN: 1.0 / 6,
			// cs.AI and Computer Science -> computer-science, math.CO ->
			// mathematics, hep-th -> physics.
			roundmetrics.DomainsCovered: 3,
			roundmetrics.DomainCoverage: 3.0 / 13,
			// The fixture has no calls tables: no call was answered by a
			// served policy.
			roundmetrics.OnPolicy: 0, roundmetrics.PolicyCalls: 0,
		}
		require.Len(t, got, len(want), "metrics written: %v", rows)
		for name, v := range want {
			require.Contains(t, got, name)
			require.InDelta(t, v, got[name], 1e-12, name)
		}
		require.Equal(t, map[string]float64{"planning": 0.5, "spatial": 0.6, "logic": 0.5}, rounded(skill))

		s := roundmetrics.Summary(1, true, rows)
		require.Equal(t, 7, s.Environments)
		require.Equal(t, 6, s.Valid)
		require.Equal(t, 3, s.Admitted, "the report's admitted is the pool size")
		require.InDelta(t, 0.75, s.ValidityRate, 1e-12)
	})

	t.Run("round between regenerations", func(t *testing.T) {
		got, skill, rows := metricsOf(t, st, "m", 2)
		want := map[string]float64{
			roundmetrics.Plays:             2,
			roundmetrics.PlayErrors:        0,
			roundmetrics.Played:            2,
			roundmetrics.Admitted:          3, // every pool environment's label
			roundmetrics.LearnableFraction: 1.0 / 2,
			roundmetrics.WinRate:           (0.5 + 1.0) / 2,
			roundmetrics.RewardLevels:      1, // a: {1}; b: {0}
			roundmetrics.MemorySize:        0, // the optional memory input is absent
			roundmetrics.PoolSize:          3,
			roundmetrics.TrainSamples:      2,
			roundmetrics.OnPolicy:          0,
			roundmetrics.PolicyCalls:       0,
		}
		require.Len(t, got, len(want), "no regret (no hinted plays) and no generation metrics: %v", rows)
		for name, v := range want {
			require.Contains(t, got, name)
			require.InDelta(t, v, got[name], 1e-12, name)
		}
		require.Equal(t, map[string]float64{"planning": 0.75}, rounded(skill))

		s := roundmetrics.Summary(2, false, rows)
		require.True(t, math.IsNaN(s.ValidityRate))
		require.True(t, math.IsNaN(s.RegretMean))
		require.True(t, math.IsNaN(s.VendiPerN))
	})
}

// rounded rounds each value to 12 decimals, so that maps of means
// compare exactly.
func rounded(m map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		out[k] = math.Round(v*1e12) / 1e12
	}
	return out
}

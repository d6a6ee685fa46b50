package roundtest

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/reward"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/diff"
	"github.com/spade-pipeline/spade/schemas"
)

// The recipe tests run the files of configs/ offline: each ablation's
// rounds 1..5 and the games recipe (blend reward, designer delay 4)
// rounds 1..9, on the procedural backend without a trainer, shrunk to a
// few slots and plays so that each run takes seconds (docs/recipes.md).

// recipeRounds is how many rounds an ablation runs: two regenerations
// (rounds 1 and 5) with the files' k = 4.
const recipeRounds = 5

// loadRecipe reads configs/<name>.yaml, ignoring SPADE_* variables.
func loadRecipe(t *testing.T, name string) config.Config {
	t.Helper()
	cfg, _, err := config.Load(filepath.Join("..", "..", "configs", name+".yaml"), nil)
	require.NoError(t, err, "load configs/%s.yaml", name)
	return cfg
}

// shrink makes a recipe run offline and fast: the procedural backend
// (with two of its six skills: it designs for no other names), no
// trainer, 6 slots, 4 plays per arm, 15 turns. Only sizes, the skills and
// the backend change; every setting the recipe is about is kept.
func shrink(cfg config.Config) config.Config {
	cfg.Model.Backend, cfg.Model.BaseURL, cfg.Model.Name = "procedural", "", ""
	// Two of the procedural skills, both active in every regeneration, so
	// that round 5's prompts can draw memory seeds of round 1 (with 3 of 6
	// skills round-robin, round 5's skills are the other three) and the 6
	// slots still cycle through every prompt kind.
	cfg.Sample.Skills = config.Default().Sample.Skills[:2]
	cfg.Sample.ActiveSkills = 2
	cfg.GRPO.Trainer = "none"
	cfg.Workers = 2
	cfg.Sample.Slots = 6
	cfg.Design.SlotsPerPart = 3
	cfg.Rollout.GroupSize = 4
	cfg.Rollout.EnvsPerPart = 3
	cfg.Rollout.MaxTurns = 15
	return cfg
}

// recipeRuns holds one produced run per recipe name.
var (
	recipeMu   sync.Mutex
	recipeRuns = map[string]*shared{}
)

// recipeRun runs rounds 0..last of the shrunk recipe once per test binary.
func recipeRun(t *testing.T, name string, last int) *fixture {
	t.Helper()
	recipeMu.Lock()
	s := recipeRuns[name]
	if s == nil {
		s = &shared{}
		recipeRuns[name] = s
	}
	recipeMu.Unlock()
	cfg := shrink(loadRecipe(t, name))
	return s.get(t, func() (*fixture, error) {
		ctx := context.Background()
		f, err := newFixture(ctx, "recipe-"+name, name, cfg)
		if err != nil {
			return nil, err
		}
		if err := runRounds(ctx, f.store, f.run, cfg, last); err != nil {
			return nil, err
		}
		f.db, err = f.openSQL(ctx, f.run)
		return f, err
	})
}

// TestAblations runs every ablation file for rounds 1..5 beside the
// default file, checks that each changes what it says, and that spade
// diff names exactly the settings it flips.
func TestAblations(t *testing.T) {
	def := recipeRun(t, "default", recipeRounds)
	// What the ablations take away is there in the full method.
	require.Positive(t, count(t, def.db, `SELECT count(*) FROM slots WHERE kind = 'grounded' AND len(doc_ids) > 0`))
	require.Positive(t, count(t, def.db, `SELECT count(*) FROM designs WHERE round = 5 AND prompt LIKE '%Environments that worked%'`))
	require.Positive(t, count(t, def.db, `SELECT count(*) FROM train_batch WHERE role = 'designer'`))
	cases := []struct {
		name  string
		flips []string
		check func(t *testing.T, f *fixture)
	}{
		{"ablation-no-grounding", []string{"ablation.no_grounding"}, func(t *testing.T, f *fixture) {
			require.Zero(t, count(t, f.db, `SELECT count(*) FROM slots WHERE kind = 'grounded' OR len(doc_ids) > 0`))
			require.Positive(t, count(t, f.db, `SELECT count(*) FROM environments WHERE valid`))
		}},
		{"ablation-no-memory", []string{"ablation.no_memory"}, func(t *testing.T, f *fixture) {
			require.Zero(t, count(t, f.db, `SELECT count(*) FROM designs WHERE prompt LIKE '%Environments that worked%' OR prompt LIKE '%Environments to avoid%'`))
			require.Positive(t, count(t, f.db, `SELECT count(*) FROM memory WHERE round = 4`), "the memory is still kept")
		}},
		{"ablation-frozen-designer", []string{"ablation.frozen_designer"}, func(t *testing.T, f *fixture) {
			require.Zero(t, count(t, f.db, `SELECT count(*) FROM train_batch WHERE role = 'designer'`))
			require.Positive(t, count(t, f.db, `SELECT count(*) FROM train_batch WHERE role = 'agent'`))
		}},
		{"ablation-frozen-designer-no-memory", []string{"ablation.no_memory", "ablation.frozen_designer"}, func(t *testing.T, f *fixture) {
			require.Zero(t, count(t, f.db, `SELECT count(*) FROM train_batch WHERE role = 'designer'`))
			require.Zero(t, count(t, f.db, `SELECT count(*) FROM designs WHERE prompt LIKE '%Environments that worked%'`))
		}},
		{"ablation-solve-rate", []string{"label.designer_reward"}, func(t *testing.T, f *fixture) {
			none(t, f.db, "designer reward is not the solve-rate plateau", `
				SELECT round, env_id, win_rate, designer_reward FROM labels
				WHERE round IN (1, 5) AND (designer_reward IS NULL OR abs(designer_reward - CASE
					WHEN NOT valid THEN -1
					WHEN win_rate < 0.4 THEN greatest(0, 1 - (0.4 - win_rate) / 0.25)
					WHEN win_rate > 0.6 THEN greatest(0, 1 - (win_rate - 0.6) / 0.25)
					ELSE 1 END) > 1e-9)`)
		}},
		{"ablation-learning-potential", []string{"label.designer_reward"}, func(t *testing.T, f *fixture) {
			// Round 1 has no history: baseline 0, reward = win rate.
			none(t, f.db, "round 1 learning potential", `
				SELECT env_id FROM labels WHERE round = 1 AND
				(designer_reward IS NULL OR abs(designer_reward - CASE WHEN valid THEN win_rate ELSE -1 END) > 1e-9)`)
			// Round 5: |win rate - slow EMA of rounds 1..4|, folded here
			// from the stored labels.
			var hist [][]schemas.Label
			for r := 1; r < 5; r++ {
				_, rs := rows(t, f.db, `SELECT skill, valid, plays, win_rate FROM labels WHERE round = ? ORDER BY env_id`, r)
				var ls []schemas.Label
				for _, x := range rs {
					plays, _ := strconv.ParseInt(x[2], 10, 64)
					wr, _ := strconv.ParseFloat(x[3], 64)
					ls = append(ls, schemas.Label{Skill: x[0], Valid: x[1] == "true", Plays: plays, WinRate: wr})
				}
				hist = append(hist, ls)
			}
			base := reward.Baselines(hist, f.cfg.Label.LearningPotential)
			_, rs := rows(t, f.db, `SELECT skill, valid, win_rate, designer_reward FROM labels WHERE round = 5`)
			require.NotEmpty(t, rs)
			for _, x := range rs {
				wr, _ := strconv.ParseFloat(x[2], 64)
				got, _ := strconv.ParseFloat(x[3], 64)
				want := -1.0
				if x[1] == "true" {
					want = wr - base[x[0]].Baseline()
					if want < 0 {
						want = -want
					}
				}
				require.InDelta(t, want, got, 1e-9, "skill %s", x[0])
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := recipeRun(t, tc.name, recipeRounds)
			require.Equal(t, int64(recipeRounds), count(t, f.db, `SELECT max(round) FROM labels`))
			tc.check(t, f)
			rep, err := diff.Runs(context.Background(), diff.Side{Store: def.store, Run: def.run}, diff.Side{Store: f.store, Run: f.run}, diff.Options{Tables: []string{"labels"}})
			require.NoError(t, err)
			var keys []string
			for _, s := range rep.Config {
				keys = append(keys, s.Key)
			}
			require.Equal(t, append([]string{"recipe"}, tc.flips...), keys, "spade diff default %s", tc.name)
		})
	}
}

// TestBlendDelay runs the games recipe (blend reward, designer delay 4,
// k = 4) shrunk for rounds 1..9: designer samples train only in rounds 5
// and 9, sampled in rounds 1 and 5, rewarded by the blend recomputed here
// in SQL over the window (mean win rate of rounds s..s+3, regret of
// round s).
func TestBlendDelay(t *testing.T) {
	f := recipeRun(t, "games-30b-a3b", 9)
	require.Equal(t, 4, f.cfg.GRPO.DesignerDelay)
	require.Equal(t, config.DesignerRewardBlend, f.cfg.Label.DesignerReward)
	_, got := rows(t, f.db, `SELECT round, sampled_round, count(*) FROM train_batch WHERE role = 'designer' GROUP BY ALL ORDER BY round`)
	require.Equal(t, [][]string{{"5", "1", got[0][2]}, {"9", "5", got[1][2]}}, got)
	none(t, f.db, "agent samples not of their own round", `SELECT round, sample_id FROM train_batch WHERE role = 'agent' AND sampled_round <> round`)
	for _, s := range []int{1, 5} {
		q := fmt.Sprintf(`
			WITH w AS (SELECT env_id, avg(win_rate) AS wr FROM labels
			           WHERE round BETWEEN %[1]d AND %[1]d + 3 AND plays > 0 GROUP BY env_id),
			l AS (SELECT l.slot_id, l.valid, l.regret, w.wr,
			             CASE WHEN e.reward_high - e.reward_low > 0 THEN e.reward_high - e.reward_low ELSE 1 END AS width
			      FROM labels l JOIN environments e ON e.round = %[1]d AND e.env_id = l.env_id
			      LEFT JOIN w ON w.env_id = l.env_id WHERE l.round = %[1]d),
			want AS (SELECT slot_id, CASE WHEN NOT valid THEN -1.0 ELSE
			           0.6 * CASE WHEN wr < 0.4 THEN greatest(0, 1 - (0.4 - wr) / 0.25)
			                      WHEN wr > 0.6 THEN greatest(0, 1 - (wr - 0.6) / 0.25) ELSE 1 END
			         + 0.4 * least(1, greatest(0, regret / width / 0.15)) END AS reward
			         FROM l WHERE NOT valid OR regret IS NOT NULL)
			SELECT d.slot_id, want.reward, b.reward FROM designs d
			JOIN want ON want.slot_id = d.slot_id
			LEFT JOIN train_batch b ON b.round = %[1]d + 4 AND b.sample_id = 'designer-' || d.slot_id || '-' || d.attempt
			WHERE d.round = %[1]d AND d.final AND d.response <> ''
			  AND (b.reward IS NULL OR abs(b.reward - want.reward) > 1e-9)`, s)
		none(t, f.db, fmt.Sprintf("delayed blend reward of round %d's designs", s), q)
		require.Positive(t, count(t, f.db, fmt.Sprintf(`SELECT count(*) FROM train_batch WHERE round = %d AND role = 'designer' AND reward > 0`, s+4)))
	}
}

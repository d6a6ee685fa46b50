package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// blendConfig is testdata/small.yaml with the public recipes' designer
// reward (label.designer_reward blend, its parameters at their defaults)
// and a regeneration every 2 rounds, so that rounds 1..3 hold two
// regeneration rounds (1 and 3) and a pool round between them.
const blendConfig = `# small.yaml with the blend designer reward
seed: 7
workers: 2
regenerate_every: 2
sample:
  slots: 6
design:
  slots_per_part: 2
rollout:
  group_size: 4
  envs_per_part: 2
label:
  designer_reward: blend
`

// blendWant recomputes, in SQL, the blend of docs/regret.md "Other
// formulas" with the public recipes' parameters: 0.6 x plateau(win rate)
// (1 on [0.4, 0.6], falling to 0 over 0.25) + 0.4 x clip(regret / width /
// 0.15, 0, 1); -1 for an invalid environment; NULL (unmeasured) for a
// valid one without hinted plays. It lists the labels of regeneration
// rounds whose designer_reward differs.
const blendWant = `
	WITH w AS (
	  SELECT l.round, l.env_id, l.valid, l.win_rate, l.regret, l.designer_reward,
	         CASE WHEN e.reward_high - e.reward_low > 0 THEN e.reward_high - e.reward_low ELSE 1 END AS width
	  FROM labels l JOIN environments e ON e.round = l.round AND e.env_id = l.env_id),
	want AS (
	  SELECT *, CASE
	    WHEN NOT valid THEN -1.0
	    WHEN regret IS NULL THEN NULL
	    ELSE 0.6 * CASE WHEN win_rate < 0.4 THEN greatest(0, 1 - (0.4 - win_rate) / 0.25)
	                    WHEN win_rate > 0.6 THEN greatest(0, 1 - (win_rate - 0.6) / 0.25)
	                    ELSE 1 END
	       + 0.4 * least(1, greatest(0, regret / width / 0.15)) END AS want
	  FROM w)
	SELECT round, env_id, win_rate, regret, designer_reward, want FROM want
	WHERE (designer_reward IS NULL) <> (want IS NULL) OR abs(designer_reward - want) > 1e-9
	ORDER BY round, env_id`

// TestBlendRoundsCLI runs rounds 1..3 with label.designer_reward blend
// through the CLI, offline on the procedural backend, as a user would
// (`spade --config F round N`): every round commits; the labels of the
// regeneration rounds (1 and 3) carry the blend recomputed in SQL, in
// [0, 1] for valid environments, and some of it comes from the regret
// term (the designs are not rewarded by the plateau alone); the pool round
// has no designer reward; the designer samples of rounds 1 and 3 carry
// their labels' rewards; config show says which reward the run uses.
func TestBlendRoundsCLI(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "blend.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(blendConfig), 0o644))
	kinds := []string{"regeneration round", "pool round", "regeneration round"}
	for r, kind := range kinds {
		n := string(rune('1' + r))
		res := spade(t, dir, nil, "--config", cfg, "round", n)
		require.Equal(t, 0, res.code, "round %s: %s", n, res.stderr)
		require.Contains(t, res.stdout, "round "+n+" of run default committed")
		require.Contains(t, res.stdout, kind)
	}
	sql := func(q string) string {
		t.Helper()
		res := spade(t, dir, nil, "--config", cfg, "sql", "--format", "csv", q)
		require.Equal(t, 0, res.code, "%s: %s", q, res.stderr)
		return strings.TrimSpace(res.stdout)
	}
	// The header line only: no label differs from the formula.
	require.Equal(t, "round,env_id,win_rate,regret,designer_reward,want", sql(blendWant))
	require.Equal(t, "n\n0", sql(`SELECT count(*) AS n FROM labels WHERE round = 2 AND designer_reward IS NOT NULL`), "no designer reward on a pool round")
	require.Equal(t, "n\n0", sql(`SELECT count(*) AS n FROM labels WHERE valid AND (designer_reward < 0 OR designer_reward > 1)`), "a valid blend is in [0, 1]")
	// The regret term takes part: some valid environment has a positive
	// regret and a measured reward.
	require.Equal(t, "ok\ntrue", sql(`SELECT count(*) > 0 AS ok FROM labels WHERE valid AND regret > 0 AND designer_reward IS NOT NULL`))
	// Designer samples: regeneration rounds only, each final attempt with
	// its label's reward (the batch trains designs in their own round:
	// grpo.designer_delay 0).
	require.Equal(t, "round,n\n1,6\n3,6", sql(`SELECT round, count(*) AS n FROM train_batch WHERE role = 'designer' GROUP BY round ORDER BY round`))
	require.Equal(t, "n\n0", sql(`
		SELECT count(*) AS n FROM designs d
		JOIN labels l ON l.round = d.round AND l.slot_id = d.slot_id
		JOIN train_batch b ON b.round = d.round AND b.sample_id = 'designer-' || d.slot_id || '-' || d.attempt
		WHERE d.final AND l.designer_reward IS NOT NULL AND abs(b.reward - l.designer_reward) > 1e-9`))
	show := spade(t, dir, nil, "--config", cfg, "config", "show")
	require.Equal(t, 0, show.code, show.stderr)
	require.Contains(t, show.stdout, `label.designer_reward = "blend"`)
	pinned := spade(t, dir, nil, "--run", "default", "config", "show")
	require.Equal(t, 0, pinned.code, pinned.stderr)
	require.Contains(t, pinned.stdout, `label.designer_reward = "blend"`, "the run pinned the reward")
}

// TestConfigShowRecipe: `spade config show` names the recipe a config
// file follows (configs/<recipe>.yaml, docs/recipes.md) and says when a
// config follows none; the recipe's designer reward is shown with the
// file it came from.
func TestConfigShowRecipe(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"games-4b", "tool-use-30b-a3b", "ablation-solve-rate"} {
		f, err := filepath.Abs(filepath.Join("..", "..", "configs", name+".yaml"))
		require.NoError(t, err)
		show := spade(t, dir, nil, "--config", f, "config", "show")
		require.Equal(t, 0, show.code, "%s: %s", name, show.stderr)
		require.Contains(t, show.stdout, "# recipe = "+name+"\n", name)
		require.Contains(t, show.stdout, "label.designer_reward = ", name)
		require.Contains(t, show.stdout, "("+f+"; env SPADE_LABEL_DESIGNER_REWARD)", name)
	}
	show := spade(t, dir, nil, "config", "show")
	require.Equal(t, 0, show.code, show.stderr)
	require.Contains(t, show.stdout, "# recipe = (none: a config of your own")
	require.Contains(t, show.stdout, `label.designer_reward = "regret"  (default;`)
}

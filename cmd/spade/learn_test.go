package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/internal/pyenv"
)

// learnRounds is how many rounds TestSelfPlayLoop runs of the CPU
// learning recipe, and learnRise the least rise of the held-out exact
// match (greedy, the 40 seeds of configs/pools/learnable/eval) from the
// base model to the last round's checkpoint that it accepts. Measured on
// this 2-core machine kind (2026-12-08, 556 s): 0.225 (base), then 0.475,
// 0.425, 0.475 after rounds 1 to 3, a rise of 0.25; the plays' win rate
// 0.375, 0.469, 0.5 (docs/recipes.md, "Learning on a CPU").
const (
	learnRounds = 3
	learnRise   = 0.1
)

// TestSelfPlayLoop runs the CPU learning recipe (configs/learn-cpu.yaml)
// as a newcomer's `make demo` does, for learnRounds rounds: the real
// SmolLM2-135M-Instruct, served by spade with `transformers serve`
// (model.serving: managed) and trained by the torch trainer, plays the
// four one-turn games of configs/pools/learnable (imported as round 0),
// and the eval stage scores each round's checkpoint on held-out seeds of
// the same games. It checks that the loop is closed (round r's agent
// calls are answered by checkpoint r-1, every round on-policy), that
// every step trained on non-zero advantages (some group's plays had
// different rewards), and that the model learned: the last checkpoint's
// held-out exact match, served by spade, is at least learnRise above the
// base model's (`spade eval --round 0`). The plays' own win rate at
// temperature 0.7 is logged: over 32 plays a round it moves by about
// 0.09 from sampling alone, too much for a threshold over three rounds.
func TestSelfPlayLoop(t *testing.T) {
	py := pyenv.Require(t, "torch", "transformers", "lm_eval")
	ckpt := pyenv.RequireModel(t, "smollm2-135m-instruct")
	recipe, err := filepath.Abs("../../configs/learn-cpu.yaml")
	require.NoError(t, err)
	body, err := os.ReadFile(recipe)
	require.NoError(t, err)
	// The recipe names the pinned venv and cache by their default paths,
	// as a newcomer's machine has them.
	const serveBin, hub = "/opt/spade/venv/bin/transformers", "/opt/spade/cache/hf"
	require.Contains(t, string(body), serveBin)
	require.Contains(t, string(body), "HF_HUB_CACHE="+hub)
	if _, err := os.Stat(serveBin); err != nil {
		t.Skipf("configs/learn-cpu.yaml serves with %s, which this machine's venv (%s) does not have", serveBin, pyenv.Venv())
	}
	// transformers serve answers HTTP 500 while its hub cache is missing
	// (scripts/demo.sh makes it too).
	require.NoError(t, os.MkdirAll(hub, 0o755))

	dir := t.TempDir()
	cache := filepath.Join(t.TempDir(), "cache")
	env := []string{
		"SPADE_STORE=file://" + filepath.Join(dir, "runs"),
		"SPADE_RUN=learn",
		"SPADE_GRPO_BASE_CHECKPOINT=" + ckpt,
		"SPADE_GRPO_PYTHON=" + py,
		"SPADE_EVAL_PYTHON=" + py,
		"SPADE_MODEL_CHECKPOINT_CACHE=" + cache,
	}
	run := func(args ...string) string {
		t.Helper()
		r := spade(t, dir, env, append([]string{"--config", recipe}, args...)...)
		require.Equal(t, 0, r.code, "spade %s: %s", strings.Join(args, " "), r.stderr)
		return r.stdout
	}
	sql := func(q string) string {
		t.Helper()
		out := run("sql", "--format", "csv", q)
		_, rows, _ := strings.Cut(strings.TrimSpace(out), "\n")
		return strings.TrimSpace(rows)
	}
	// The recipe's relative eval.lm_eval.include_path is the repository's.
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	env = append(env, "SPADE_EVAL_LM_EVAL_INCLUDE_PATH="+filepath.Join(root, "configs", "pools", "learnable", "eval"))
	require.Contains(t, run("pool", "import", filepath.Join(root, "configs", "pools", "learnable")), "4 valid (the pool)")
	base := -1.0
	for _, line := range strings.Split(run("eval", "--round", "0"), "\n") {
		if f := strings.Fields(line); len(f) >= 4 && f[1] == "learnable_games" {
			base, err = strconv.ParseFloat(f[3], 64)
			require.NoError(t, err, line)
		}
	}
	require.GreaterOrEqual(t, base, 0.0, "spade eval --round 0 printed no learnable_games score")
	for r := 1; r <= learnRounds; r++ {
		run("round", strconv.Itoa(r))
	}

	// The loop is closed: round r is played by checkpoint r-1.
	calls := strings.Split(sql("select round || '=' || string_agg(distinct checkpoint_id, ',') from rollout_calls group by round order by round"), "\n")
	require.Len(t, calls, learnRounds)
	require.Equal(t, "1=base:"+ckpt, calls[0])
	for r := 2; r <= learnRounds; r++ {
		prev := sql(fmt.Sprintf("select checkpoint_id from checkpoints where round = %d", r-1))
		require.Regexp(t, `^[0-9a-f]{16}$`, prev, "round %d trained a checkpoint", r-1)
		require.Equal(t, fmt.Sprintf("%d=%s", r, prev), calls[r-1])
	}
	require.Equal(t, strings.TrimSuffix(strings.Repeat("1;", learnRounds), ";"),
		sql("select string_agg(value::int::varchar, ';' order by round) from metrics where name = 'on_policy'"))
	require.Equal(t, "0", sql("select count(*) from rollout_calls where error <> '' and error not like '%cut at max_tokens%'"))

	// Every round trained, and on groups whose rewards differ.
	var want []string
	for r := 1; r <= learnRounds; r++ {
		want = append(want, fmt.Sprintf("%d:1", r))
	}
	require.Equal(t, strings.Join(want, " "), sql("select string_agg(round || ':' || value::int, ' ' order by round) from train_metrics where name = 'trained'"))
	zero := sql("select string_agg(round || ':' || z.value::int || '/' || g.value::int, ' ' order by round) from train_metrics z join train_metrics g using (round) where z.name = 'zero_variance_groups' and g.name = 'agent_groups'")
	t.Logf("zero-variance groups per round: %s", zero)
	require.Len(t, strings.Fields(zero), learnRounds)
	for _, f := range strings.Fields(zero) {
		var r, z, g int
		_, err := fmt.Sscanf(f, "%d:%d/%d", &r, &z, &g)
		require.NoError(t, err, f)
		require.Less(t, z, g, "round %d: every group had one reward, so every advantage was 0", r)
	}

	// The model learned: the held-out exact match rises from the base's.
	t.Logf("unhinted win rate per round (temperature 0.7): %s", sql("select string_agg(round(value, 3)::varchar, ' ' order by round) from metrics where name = 'win_rate'"))
	scores := strings.Split(sql("select value from evals where task = 'learnable_games' order by round"), "\n")
	require.Len(t, scores, learnRounds, "the eval stage scored every round's checkpoint")
	last, err := strconv.ParseFloat(scores[learnRounds-1], 64)
	require.NoError(t, err, scores[learnRounds-1])
	t.Logf("held-out exact match: base %.3f, rounds 1..%d %v; rise %.3f (at least %.2f)", base, learnRounds, scores, last-base, learnRise)
	require.GreaterOrEqual(t, last-base, learnRise, "held-out exact match %.3f (base) -> %v: the model did not learn the games", base, scores)
}

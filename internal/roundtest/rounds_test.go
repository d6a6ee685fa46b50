package roundtest

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline"
)

// lastRound is how many rounds the procedural fixture runs: two
// regenerations (rounds 1 and 5) with k = 4, and the rounds between.
const lastRound = 8

var procRun shared

// procedural returns the shared run: rounds 1..8 of testdata/rounds.yaml
// on the embedded corpus with the offline procedural backend.
func procedural(t *testing.T) *fixture {
	return procRun.get(t, func() (*fixture, error) {
		ctx := context.Background()
		cfg, err := loadConfig("rounds.yaml")
		if err != nil {
			return nil, err
		}
		f, err := newFixture(ctx, "procedural", "default", cfg)
		if err != nil {
			return nil, err
		}
		if err := runRounds(ctx, f.store, f.run, cfg, lastRound); err != nil {
			return nil, err
		}
		f.db, err = f.openSQL(ctx, f.run)
		return f, err
	})
}

// regenRound returns the regeneration round in force at round r.
func (f *fixture) regenRound(r int) int {
	return pipeline.NewRoundInfo(f.run, r, &f.cfg).RegenRound
}

// TestLabelsMatchRollouts recomputes every label from its round's plays in
// SQL (docs/regret.md): play and error counts, the unhinted and hinted
// mean returns, the win rate (unhinted successes without error), regret,
// the learnable band (inclusive) and the designer reward.
func TestLabelsMatchRollouts(t *testing.T) {
	f := procedural(t)
	lo, hi := f.cfg.Label.BandLow, f.cfg.Label.BandHigh
	const perRound = `
		WITH r AS (
			SELECT round, env_id,
				count(*) AS plays,
				count(*) FILTER (WHERE error <> '') AS errors,
				count(*) FILTER (WHERE NOT hinted) AS n_u,
				coalesce(avg("return") FILTER (WHERE NOT hinted), 0) AS u_mean,
				avg("return") FILTER (WHERE hinted) AS h_mean,
				coalesce(avg(CASE WHEN success AND error = '' THEN 1.0 ELSE 0.0 END) FILTER (WHERE NOT hinted), 0) AS win
			FROM rollouts GROUP BY round, env_id)`
	none(t, f.db, "labels that differ from their rollouts", perRound+`
		SELECT l.round, l.env_id, l.plays, r.plays, l.errors, r.errors, l.unhinted_mean, r.u_mean,
			l.hinted_mean, r.h_mean, l.win_rate, r.win, l.regret, l.learnable
		FROM labels l LEFT JOIN r USING (round, env_id)
		WHERE l.plays <> coalesce(r.plays, 0)
			OR l.errors <> coalesce(r.errors, 0)
			OR abs(l.unhinted_mean - coalesce(r.u_mean, 0)) > 1e-9
			OR abs(l.win_rate - coalesce(r.win, 0)) > 1e-9
			OR (l.hinted_mean IS NULL) <> (r.h_mean IS NULL)
			OR abs(l.hinted_mean - r.h_mean) > 1e-9
			OR (l.regret IS NULL) <> (r.h_mean IS NULL)
			OR abs(l.regret - (r.h_mean - r.u_mean)) > 1e-9
			OR l.learnable <> (l.valid AND coalesce(r.n_u, 0) > 0 AND r.win >= ? AND r.win <= ?)`, lo, hi)
	none(t, f.db, "plays of environments without a label", perRound+`
		SELECT r.round, r.env_id FROM r ANTI JOIN labels l USING (round, env_id)`)
	none(t, f.db, "designer rewards that differ from the shaped regret", `
		SELECT l.round, l.env_id, l.valid, l.regret, e.reward_low, e.reward_high, l.designer_reward
		FROM labels l JOIN environments e USING (round, env_id)
		WHERE (l.designer_reward IS NULL) <> (e.valid AND l.regret IS NULL) OR abs(l.designer_reward - CASE
			WHEN NOT e.valid THEN -1
			ELSE greatest(-1, least(1, l.regret / CASE WHEN e.reward_high - e.reward_low > 0 THEN e.reward_high - e.reward_low ELSE 1 END))
		END) > 1e-12`)
	none(t, f.db, "designer rewards or regret off regeneration rounds", `
		SELECT round, env_id FROM labels
		WHERE round NOT IN (SELECT DISTINCT round FROM environments)
			AND (designer_reward IS NOT NULL OR regret IS NOT NULL OR hinted_mean IS NOT NULL)`)

	// Non-vacuous: every round has labels and plays; regeneration rounds
	// have hinted plays.
	for r := 1; r <= lastRound; r++ {
		require.Positive(t, count(t, f.db, `SELECT count(*) FROM labels WHERE round = ?`, r), "round %d has no labels", r)
		hinted := count(t, f.db, `SELECT count(*) FROM rollouts WHERE round = ? AND hinted`, r)
		if f.regenRound(r) == r {
			require.Positive(t, hinted, "regeneration round %d has no hinted plays", r)
		} else {
			require.Zero(t, hinted, "round %d between regenerations has hinted plays", r)
		}
	}
}

// TestAdmissionBand: on regeneration rounds exactly the valid environments
// with win rate inside the band (inclusive) are admitted and make the pool;
// between regenerations every pool environment stays admitted.
func TestAdmissionBand(t *testing.T) {
	f := procedural(t)
	lo, hi := f.cfg.Label.BandLow, f.cfg.Label.BandHigh
	none(t, f.db, "admission that disagrees with the band", `
		SELECT l.round, l.env_id, l.valid, l.plays, l.win_rate, l.admitted FROM labels l
		WHERE l.round IN (SELECT DISTINCT round FROM environments)
			AND l.admitted <> (l.valid AND l.plays > 0 AND l.win_rate >= ? AND l.win_rate <= ?)`, lo, hi)
	none(t, f.db, "labels between regenerations not admitted", `
		SELECT round, env_id FROM labels WHERE round NOT IN (SELECT DISTINCT round FROM environments) AND NOT admitted`)
	none(t, f.db, "regeneration pools that differ from the admitted labels", `
		(SELECT round, env_id FROM pool WHERE round IN (SELECT DISTINCT round FROM environments)
		 EXCEPT SELECT round, env_id FROM labels WHERE admitted)
		UNION ALL
		(SELECT round, env_id FROM labels WHERE admitted AND round IN (SELECT DISTINCT round FROM environments)
		 EXCEPT SELECT round, env_id FROM pool)`)
	// The band must have filtered something, or the test shows nothing.
	rejected := count(t, f.db, `SELECT count(*) FROM labels WHERE round IN (1, 5) AND valid AND NOT admitted`)
	admitted := count(t, f.db, `SELECT count(*) FROM labels WHERE round IN (1, 5) AND admitted`)
	require.Positive(t, rejected, "no valid environment fell outside the band")
	require.Positive(t, admitted, "no environment was admitted")
	t.Logf("regeneration rounds: %d admitted, %d valid but outside [%g, %g]", admitted, rejected, lo, hi)
}

// TestPoolAndMemoryCarriedByReference: a round between regenerations has
// the pool (and memory) of its regeneration round: same rows, and by
// reference, the same files in the manifest.
func TestPoolAndMemoryCarriedByReference(t *testing.T) {
	f := procedural(t)
	ctx := context.Background()
	for r := 1; r <= lastRound; r++ {
		g := f.regenRound(r)
		if g == r {
			continue
		}
		t.Run(fmt.Sprintf("round %d from %d", r, g), func(t *testing.T) {
			none(t, f.db, "pool rows that differ from the regeneration's", `
				(SELECT env_id, source, hint, admitted_round FROM pool WHERE round = ?
				 EXCEPT SELECT env_id, source, hint, admitted_round FROM pool WHERE round = ?)
				UNION ALL
				(SELECT env_id, source, hint, admitted_round FROM pool WHERE round = ?
				 EXCEPT SELECT env_id, source, hint, admitted_round FROM pool WHERE round = ?)`, r, g, g, r)
			for _, table := range []string{"pool", "memory"} {
				m, err := pipeline.ReadManifest(ctx, f.store, pipeline.ManifestKey(f.run, r, table))
				require.NoError(t, err)
				src, err := pipeline.ReadManifest(ctx, f.store, pipeline.ManifestKey(f.run, g, table))
				require.NoError(t, err)
				require.Equal(t, src.Files, m.Files, "%s of round %d must list the files of round %d", table, r, g)
				require.NotEmpty(t, m.ReferenceOf, "%s of round %d is not a reference", table, r)
				require.Equal(t, src.ContentDigest(), m.ContentDigest())
			}
		})
	}
	// The plays of a round between regenerations are exactly the pool's
	// environments, unhinted, G each.
	none(t, f.db, "plays between regenerations that do not match the pool", `
		WITH p AS (SELECT round, env_id, count(*) AS n, count(*) FILTER (WHERE hinted) AS h FROM rollouts GROUP BY ALL)
		SELECT l.round, l.env_id, p.n, p.h FROM labels l LEFT JOIN p USING (round, env_id)
		WHERE l.round NOT IN (SELECT DISTINCT round FROM environments) AND (p.n IS DISTINCT FROM ? OR p.h <> 0)`, f.cfg.Rollout.GroupSize)
}

// TestMemoryFIFO: memory never exceeds its capacity, its seqs are
// contiguous and end at the number of entries ever inserted (so exactly
// the oldest were evicted), insertion order follows (added_round,
// env_id), and every entry repeats its label.
func TestMemoryFIFO(t *testing.T) {
	f := procedural(t)
	capacity := int64(f.cfg.Memory.Capacity)
	for r := 1; r <= lastRound; r++ {
		inserted := count(t, f.db, `SELECT count(*) FROM labels WHERE round <= ? AND valid AND regret IS NOT NULL`, r)
		n := count(t, f.db, `SELECT count(*) FROM memory WHERE round = ?`, r)
		require.Equal(t, min(inserted, capacity), n, "round %d: memory size", r)
		if n == 0 {
			continue
		}
		_, got := rows(t, f.db, `SELECT min(seq), max(seq) FROM memory WHERE round = ?`, r)
		require.Equal(t, []string{fmt.Sprint(inserted - n), fmt.Sprint(inserted - 1)}, got[0],
			"round %d: memory must hold seqs %d..%d (the newest %d of %d inserted)", r, inserted-n, inserted-1, n, inserted)
	}
	total := count(t, f.db, `SELECT count(*) FROM labels WHERE valid AND regret IS NOT NULL`)
	require.Greater(t, total, capacity, "the fixture must insert more than the capacity so eviction is tested")
	none(t, f.db, "seqs out of insertion order", `
		SELECT * FROM (
			SELECT round, seq, added_round, env_id,
				lag(added_round) OVER w AS prev_round, lag(env_id) OVER w AS prev_env
			FROM memory WINDOW w AS (PARTITION BY round ORDER BY seq))
		WHERE added_round < prev_round OR (added_round = prev_round AND env_id <= prev_env)`)
	none(t, f.db, "memory entries that differ from their labels", `
		SELECT m.round, m.seq, m.env_id FROM memory m
		LEFT JOIN labels l ON l.round = m.added_round AND l.env_id = m.env_id
		WHERE l.env_id IS NULL OR l.skill <> m.skill OR l.win_rate <> m.win_rate OR l.regret <> m.regret OR NOT l.valid`)
}

// TestSeedsUniqueAndReproducible: every play of a round has its own reset
// seed; round 1 of a second run with the same config (another run name)
// plays the same seeds and writes the same rollouts and labels.
func TestSeedsUniqueAndReproducible(t *testing.T) {
	f := procedural(t)
	ctx := context.Background()
	none(t, f.db, "repeated play seeds within a round", `
		SELECT round, seed, count(*) FROM rollouts GROUP BY round, seed HAVING count(*) > 1`)
	require.NoError(t, runRounds(ctx, f.store, "again", f.cfg, 1))
	db2, err := f.openSQL(ctx, "again")
	require.NoError(t, err)
	defer db2.Close()
	const q = `SELECT env_id, hinted, sample, seed FROM rollouts WHERE round = 1 ORDER BY ALL`
	_, a := rows(t, f.db, q)
	_, b := rows(t, db2, q)
	require.NotEmpty(t, a)
	require.Equal(t, a, b, "a second run of round 1 must play the same seeds")
	for _, table := range []string{"slots", "environments", "rollouts", "labels", "train_batch"} {
		ma, err := pipeline.ReadManifest(ctx, f.store, pipeline.ManifestKey(f.run, 1, table))
		require.NoError(t, err)
		mb, err := pipeline.ReadManifest(ctx, f.store, pipeline.ManifestKey("again", 1, table))
		require.NoError(t, err)
		require.Equal(t, ma.ContentDigest(), mb.ContentDigest(), "%s of round 1 differs between runs", table)
	}
}

// TestTrainBatch: agent samples are the unhinted plays of admitted
// environments, their advantages have mean 0 per group (|mean| < 1e-9)
// and zero-variance groups have all-zero advantages; designer samples
// exist exactly on regeneration rounds.
func TestTrainBatch(t *testing.T) {
	f := procedural(t)
	none(t, f.db, "agent groups whose advantages do not have mean 0", `
		SELECT round, "group", count(*), avg(advantage), min(reward), max(reward), max(abs(advantage))
		FROM train_batch WHERE role = 'agent' GROUP BY round, "group"
		HAVING abs(avg(advantage)) >= 1e-9 OR (min(reward) = max(reward) AND max(abs(advantage)) <> 0)`)
	none(t, f.db, "agent samples that are not unhinted plays of admitted environments", `
		(SELECT round, "group" AS env_id, reward FROM train_batch WHERE role = 'agent'
		 EXCEPT ALL
		 SELECT r.round, r.env_id, r."return" FROM rollouts r JOIN labels l USING (round, env_id) WHERE NOT r.hinted AND l.admitted)
		UNION ALL
		(SELECT r.round, r.env_id, r."return" FROM rollouts r JOIN labels l USING (round, env_id) WHERE NOT r.hinted AND l.admitted
		 EXCEPT ALL
		 SELECT round, "group", reward FROM train_batch WHERE role = 'agent')`)
	_, got := rows(t, f.db, `SELECT DISTINCT round FROM train_batch WHERE role = 'designer' ORDER BY round`)
	var regen [][]string
	for r := 1; r <= lastRound; r++ {
		if f.regenRound(r) == r {
			regen = append(regen, []string{fmt.Sprint(r)})
		}
	}
	require.Equal(t, regen, got, "designer samples exactly on regeneration rounds")
	none(t, f.db, "designer samples that do not match the design attempts", `
		(SELECT round, sample_id FROM train_batch WHERE role = 'designer'
		 EXCEPT SELECT round, 'designer-' || slot_id || '-' || attempt FROM designs WHERE response <> '')
		UNION ALL
		(SELECT round, 'designer-' || slot_id || '-' || attempt FROM designs WHERE response <> ''
		 EXCEPT SELECT round, sample_id FROM train_batch WHERE role = 'designer')`)
	none(t, f.db, "designer rewards outside [-1, 1] or earlier attempts not -1", `
		SELECT t.round, t.sample_id, t.reward FROM train_batch t
		JOIN designs d ON t.round = d.round AND t.sample_id = 'designer-' || d.slot_id || '-' || d.attempt
		WHERE t.reward < -1 OR t.reward > 1 OR (NOT d.final AND t.reward <> -1)`)
	flat := count(t, f.db, `SELECT count(*) FROM (SELECT 1 FROM train_batch WHERE role = 'agent' GROUP BY round, "group" HAVING min(reward) = max(reward))`)
	groups := count(t, f.db, `SELECT count(DISTINCT (round, "group")) FROM train_batch WHERE role = 'agent'`)
	require.Positive(t, groups)
	t.Logf("%d agent groups, %d with zero variance", groups, flat)
}

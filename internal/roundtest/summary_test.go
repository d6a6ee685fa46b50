package roundtest

import (
	"context"
	"database/sql"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/stages/roundmetrics"
)

// TestRoundSummaryMatchesTables checks report.RoundSummary against the
// tables, as its field comments and docs/metrics.md define it:
// Environments is the environments table's row count (not the slots),
// Valid its valid rows, Admitted the pool's rows, ValidityRate valid ÷
// slots on regeneration rounds (NaN otherwise), WinRate the mean win rate
// of the labels that are valid and played.
func TestRoundSummaryMatchesTables(t *testing.T) {
	f := procedural(t)
	ctx := context.Background()
	for r := 1; r <= lastRound; r++ {
		regen := f.regenRound(r) == r
		m, err := pipeline.ReadManifest(ctx, f.store, pipeline.ManifestKey(f.run, r, "metrics"))
		require.NoError(t, err)
		rows, err := pipeline.ReadManifestRows(ctx, f.store, schemas.Metrics, m)
		require.NoError(t, err)
		s := roundmetrics.Summary(r, regen, rows)

		envs := count(t, f.db, `SELECT count(*) FROM environments WHERE round = ?`, r)
		valid := count(t, f.db, `SELECT count(*) FROM environments WHERE round = ? AND valid`, r)
		require.EqualValues(t, envs, s.Environments, "round %d Environments", r)
		require.EqualValues(t, valid, s.Valid, "round %d Valid", r)
		require.EqualValues(t, count(t, f.db, `SELECT count(*) FROM pool WHERE round = ?`, r), s.Admitted, "round %d Admitted", r)
		if regen {
			slots := count(t, f.db, `SELECT count(*) FROM slots WHERE round = ?`, r)
			require.Positive(t, slots)
			require.InDelta(t, float64(valid)/float64(slots), s.ValidityRate, 1e-12, "round %d ValidityRate", r)
			t.Logf("round %d: %d slots, %d environments, %d valid", r, slots, envs, valid)
		} else {
			require.Zero(t, s.Environments, "round %d", r)
			require.True(t, math.IsNaN(s.ValidityRate), "round %d ValidityRate %v off regeneration", r, s.ValidityRate)
		}
		var win sql.NullFloat64
		require.NoError(t, f.db.QueryRowContext(ctx, `SELECT avg(win_rate) FROM labels WHERE round = ? AND valid AND plays > 0`, r).Scan(&win))
		require.True(t, win.Valid, "round %d has no played environment", r)
		require.InDelta(t, win.Float64, s.WinRate, 1e-9, "round %d WinRate", r)
	}
}

package pipeline_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/table"
	"github.com/spade-pipeline/spade/schemas"
)

// scanner reads round r's metrics (gen's output) with pipeline.ScanAll and
// hands what it saw to check; "memory" of round r is a declared optional
// input that no stage writes. It emits one train_metrics row.
type scanner struct {
	check func(ctx context.Context, env *pipeline.Env) error
}

func (scanner) Name() string               { return "scanner" }
func (scanner) Outputs() []pipeline.Output { return []pipeline.Output{{Table: "train_metrics"}} }
func (scanner) Plan(ri pipeline.RoundInfo, _ *config.Config) ([]pipeline.Input, bool) {
	return []pipeline.Input{{Table: "metrics", Round: ri.Round}, {Table: "memory", Round: ri.Round, Optional: true}}, ri.Round > 0
}
func (scanner) ConfigSubset(*config.Config) any                   { return nil }
func (scanner) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }
func (s scanner) Run(ctx context.Context, env *pipeline.Env, _ int, out *pipeline.Out) error {
	if err := s.check(ctx, env); err != nil {
		return err
	}
	pipeline.Emit(out, schemas.TrainMetrics, "train_metrics", schemas.TrainMetric{Step: int64(env.Round.Round), Name: "scanned"})
	return nil
}

// scanRunner returns a runner of gen (parts part files of metrics) and
// sc over st, with round 0 sealed and gen's round 1 committed.
func scanRunner(t *testing.T, st storage.Store, parts int, sc scanner) *pipeline.Runner {
	t.Helper()
	ctx := context.Background()
	r := &pipeline.Runner{Store: st, Run: "a", Config: config.Default(), Stages: []pipeline.Stage{&gen{parts: parts, rows: 10 * parts, failPart: -1}, sc}}
	_, err := r.RunRound(ctx, 0)
	require.NoError(t, err)
	_, err = r.RunStage(ctx, 1, "gen", pipeline.Shard{Index: 0, Count: 1}, true)
	require.NoError(t, err)
	return r
}

// TestScanAll: fn gets each file's rows, in part order, exactly as the file
// decodes; a missing optional input calls fn never; an undeclared input is
// an error; fn's error comes back as it is and stops the scan; a damaged
// file is an integrity error naming its key, after the files before it
// were handed to fn and before any after it is read.
func TestScanAll(t *testing.T) {
	ctx := context.Background()
	st := memStore(t)
	errStop := errors.New("stop here")
	var chunks [][]schemas.Metric
	var undeclared, stopped error
	var optionalCalls, afterStop int
	sc := scanner{check: func(ctx context.Context, env *pipeline.Env) error {
		err := pipeline.ScanAll(ctx, env, schemas.Metrics, "metrics", 1, func(rows []schemas.Metric) error {
			chunks = append(chunks, rows)
			return nil
		})
		if err != nil {
			return err
		}
		if err := pipeline.ScanAll(ctx, env, schemas.Memory, "memory", 1, func([]schemas.MemoryEntry) error { optionalCalls++; return nil }); err != nil {
			return err
		}
		undeclared = pipeline.ScanAll(ctx, env, schemas.Metrics, "metrics", 2, func([]schemas.Metric) error { return nil })
		stopped = pipeline.ScanAll(ctx, env, schemas.Metrics, "metrics", 1, func([]schemas.Metric) error { afterStop++; return errStop })
		return nil
	}}
	r := scanRunner(t, st, 5, sc)
	_, err := r.RunStage(ctx, 1, "scanner", pipeline.Shard{Index: 0, Count: 1}, true)
	require.NoError(t, err)

	m, err := pipeline.ReadManifest(ctx, st, pipeline.ManifestKey("a", 1, "metrics"))
	require.NoError(t, err)
	require.Len(t, m.Files, 5)
	require.Len(t, chunks, len(m.Files), "one call per file")
	for i, f := range m.Files {
		data, err := storage.ReadAll(ctx, st, f.Key)
		require.NoError(t, err)
		want, _, err := table.Decode(schemas.Metrics, f.Key, data)
		require.NoError(t, err)
		require.NotEmpty(t, want)
		require.Equal(t, want, chunks[i], "file %d (%s)", i, f.Key)
	}
	require.Zero(t, optionalCalls, "a missing optional input has no rows to hand over")
	require.ErrorContains(t, undeclared, "not a declared input")
	require.ErrorIs(t, stopped, errStop)
	require.Equal(t, 1, afterStop, "fn's error stops the scan")

	// A damaged third file: fn saw the two before it, none after it.
	st2, err := storage.Open(ctx, "mem://TestScanAll_damaged")
	require.NoError(t, err)
	var seen int
	sc2 := scanner{check: func(ctx context.Context, env *pipeline.Env) error {
		return pipeline.ScanAll(ctx, env, schemas.Metrics, "metrics", 1, func([]schemas.Metric) error { seen++; return nil })
	}}
	r2 := scanRunner(t, st2, 5, sc2)
	m2, err := pipeline.ReadManifest(ctx, st2, pipeline.ManifestKey("a", 1, "metrics"))
	require.NoError(t, err)
	flipByte(t, st2, m2.Files[2].Key)
	_, err = r2.RunStage(ctx, 1, "scanner", pipeline.Shard{Index: 0, Count: 1}, true)
	require.ErrorIs(t, err, pipeline.ErrIntegrity)
	require.ErrorContains(t, err, m2.Files[2].Key)
	require.Equal(t, 2, seen)
}

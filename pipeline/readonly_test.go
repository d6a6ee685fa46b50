package pipeline_test

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/storage"
)

// errReadOnly is what readOnlyStore's writes fail with.
var errReadOnly = errors.New("read-only store")

// readOnlyStore passes reads through and refuses every write, counting
// the attempts (a file store on a read-only mount, S3 credentials that
// may only read).
type readOnlyStore struct {
	storage.Store
	writes atomic.Int64
}

func (s *readOnlyStore) Put(context.Context, string, io.Reader, int64) error {
	s.writes.Add(1)
	return errReadOnly
}

func (s *readOnlyStore) PutIfAbsent(context.Context, string, io.Reader, int64) error {
	s.writes.Add(1)
	return errReadOnly
}

func (s *readOnlyStore) Delete(context.Context, string) error {
	s.writes.Add(1)
	return errReadOnly
}

// TestSealedRoundWritesNothing: running a round that is already sealed,
// or a stage that is already committed, is a no-op that attempts no write,
// so it succeeds on a read-only store. It used to fail: EnsureRun wrote
// the run file (put-if-absent) before looking at what was committed. An
// unsealed round still fails there, with the store's error; a sealed
// round under another config is still a conflict.
func TestSealedRoundWritesNothing(t *testing.T) {
	ctx := context.Background()
	st := memStore(t)
	for n := 0; n <= 1; n++ {
		_, err := newRunner(t, st, "a", &gen{parts: 2, rows: 6, failPart: -1}).RunRound(ctx, n)
		require.NoError(t, err)
	}

	ro := &readOnlyStore{Store: st}
	r := newRunner(t, ro, "a", &gen{parts: 2, rows: 6, failPart: -1})
	for n := 0; n <= 1; n++ {
		res, err := r.RunRound(ctx, n)
		require.NoError(t, err, "round %d", n)
		require.True(t, res.AlreadySealed, "round %d", n)
	}
	ran, err := r.RunStage(ctx, 1, "gen", pipeline.Shard{Index: 0, Count: 1}, true)
	require.NoError(t, err)
	require.False(t, ran)
	_, err = r.Seal(ctx, 1)
	require.NoError(t, err)
	require.Zero(t, ro.writes.Load(), "writes attempted on sealed rounds")

	r.Config.Sample.Slots = 7
	_, err = r.RunRound(ctx, 1)
	require.ErrorIs(t, err, pipeline.ErrConflict)
	require.Zero(t, ro.writes.Load())

	r.Config.Sample.Slots = newRunner(t, st, "a", nil).Config.Sample.Slots
	_, err = r.RunRound(ctx, 2)
	require.ErrorIs(t, err, errReadOnly)
	require.NotZero(t, ro.writes.Load())

	// A run that does not exist yet is still created on a writable store.
	_, err = newRunner(t, st, "b", &gen{parts: 1, rows: 1, failPart: -1}).EnsureRun(ctx)
	require.NoError(t, err)
	_, err = pipeline.ReadRunFile(ctx, st, "b")
	require.NoError(t, err)
}

package pipeline

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
)

// TestWritersAndGCExclude: a registered writer makes gc's lease busy
// (ErrBusy naming the writer), and gc takes it once the writer released;
// a writer that registers while gc holds the run waits until gc releases
// it; a registration of a writer that was killed is stale and removed, and
// so is a gc lease of a killed gc.
func TestWritersAndGCExclude(t *testing.T) {
	ctx := context.Background()
	s := leaseStore(t)
	log := slog.New(slog.DiscardHandler)

	w, err := RegisterWriter(ctx, s, "r", log)
	require.NoError(t, err)
	_, err = TakeGCLease(ctx, s, "r", log)
	require.ErrorIs(t, err, ErrBusy)
	require.ErrorContains(t, err, "is being written by pid")
	_, err = storage.ReadAll(ctx, s, GCLeaseKey("r"))
	require.ErrorIs(t, err, storage.ErrNotFound, "a busy gc leaves no lease")
	require.NoError(t, w.Check(ctx))
	w.Release()

	g, err := TakeGCLease(ctx, s, "r", log)
	require.NoError(t, err)
	registered := make(chan *HeldLease)
	go func() {
		w, err := RegisterWriter(ctx, s, "r", log)
		if err != nil {
			close(registered)
			return
		}
		registered <- w
	}()
	select {
	case <-registered:
		t.Fatal("a writer registered while gc held the run")
	case <-time.After(300 * time.Millisecond):
	}
	// gc, past its decision, still sees the waiting writer's registration.
	require.ErrorIs(t, CheckGC(ctx, s, "r", g, log), ErrBusy)
	g.Release()
	w = <-registered
	require.NotNil(t, w, "the writer registers once gc is done")
	w.Release()

	// A killed writer's registration and a killed gc's lease are stale.
	here := localProcess()
	dead := here.lease("0123456789abcdef")
	dead.PID, dead.Start = deadPID(t)
	dead.Expires = time.Now().Add(time.Hour)
	b, _ := json.Marshal(dead)
	require.NoError(t, storage.PutBytes(ctx, s, WriterLeaseKey("r", dead.Holder), b))
	require.NoError(t, CheckNoWriters(ctx, s, "r", log))
	_, err = storage.ReadAll(ctx, s, WriterLeaseKey("r", dead.Holder))
	require.ErrorIs(t, err, storage.ErrNotFound)
	require.NoError(t, storage.PutBytes(ctx, s, GCLeaseKey("r"), b))
	w, err = RegisterWriter(ctx, s, "r", log)
	require.NoError(t, err)
	w.Release()
	infos, err := s.List(ctx, "r/")
	require.NoError(t, err)
	require.Empty(t, infos)
}

// raceRunFile creates the run file of another invocation (under other's
// config) right before the runner's own put-if-absent of it, as a second
// `spade round 1` started at the same moment does.
type raceRunFile struct {
	storage.Store
	other []byte
}

func (s raceRunFile) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	if strings.HasSuffix(key, "/_RUN.json") {
		_ = storage.PutBytesIfAbsent(ctx, s.Store, key, s.other)
	}
	return s.Store.PutIfAbsent(ctx, key, r, size)
}

// TestEnsureRunRace: a run file created by another invocation between
// EnsureRun's read and its put-if-absent is compared, not reported as
// missing: another config is ErrConflict (exit 3), the same one succeeds.
// EnsureRun used to return "run r does not exist" (a shadowed err).
func TestEnsureRunRace(t *testing.T) {
	ctx := context.Background()
	mine := config.Default()
	theirs := config.Default()
	theirs.Seed++
	for _, tc := range []struct {
		name     string
		other    config.Config
		conflict bool
	}{{"another config", theirs, true}, {"the same config", mine, false}} {
		t.Run(tc.name, func(t *testing.T) {
			other := &Runner{Run: "r", Config: tc.other}
			b, _ := json.Marshal(other.runFile())
			r := &Runner{Store: raceRunFile{Store: leaseStore(t), other: b}, Run: "r", Config: mine}
			_, err := r.EnsureRun(ctx)
			if tc.conflict {
				require.ErrorIs(t, err, ErrConflict)
			} else {
				require.NoError(t, err)
			}
			require.NotErrorIs(t, err, ErrNotCommitted)
		})
	}
}

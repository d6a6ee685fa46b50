package serving_test

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/model/serving"
)

// sleeper starts a stand-in server (a process that waits until it is
// signalled) and counts the starts.
func sleeper(t *testing.T, n *int) func() (*serving.Server, error) {
	return func() (*serving.Server, error) {
		*n++
		return serving.Start([]string{"sleep", "600"}, filepath.Join(t.TempDir(), "s.log"), nil)
	}
}

func requireGone(t *testing.T, srv *serving.Server) {
	t.Helper()
	require.Eventually(t, func() bool { return errors.Is(syscall.Kill(-srv.Pid(), 0), syscall.ESRCH) }, 5*time.Second, 20*time.Millisecond, "server %d is gone", srv.Pid())
}

func requireRunning(t *testing.T, srv *serving.Server) {
	t.Helper()
	require.NoError(t, syscall.Kill(-srv.Pid(), 0), "server %d runs", srv.Pid())
}

// TestPool: a key's server is started once and reused by later leases;
// asking for another key stops the idle one first; StopIdle spares a held
// server; a server that died is replaced; Close stops everything and
// refuses later leases.
func TestPool(t *testing.T) {
	ctx := context.Background()
	p := &serving.Pool{}
	starts := 0
	a1, err := p.Acquire(ctx, "ck-a", sleeper(t, &starts))
	require.NoError(t, err)
	require.False(t, a1.Reused)
	a1.Release()
	a1.Release() // idempotent
	a2, err := p.Acquire(ctx, "ck-a", sleeper(t, &starts))
	require.NoError(t, err)
	require.True(t, a2.Reused)
	require.Same(t, a1.Server, a2.Server)
	require.Equal(t, 1, starts)
	require.Equal(t, 1, p.Starts())

	// Held: another key starts beside it, and StopIdle leaves it.
	b, err := p.Acquire(ctx, "ck-b", sleeper(t, &starts))
	require.NoError(t, err)
	require.Equal(t, 2, p.Running())
	b.Release()
	require.NoError(t, p.StopIdle(ctx, "test"))
	requireGone(t, b.Server)
	requireRunning(t, a2.Server)
	require.Equal(t, 1, p.Running())

	// Idle: the next checkpoint's server replaces it.
	a2.Release()
	c, err := p.Acquire(ctx, "ck-c", sleeper(t, &starts))
	require.NoError(t, err)
	requireGone(t, a2.Server)
	require.Equal(t, 1, p.Running())

	// A server that died is not reused.
	c.Release()
	require.NoError(t, syscall.Kill(-c.Server.Pid(), syscall.SIGKILL))
	<-c.Server.Exited()
	c2, err := p.Acquire(ctx, "ck-c", sleeper(t, &starts))
	require.NoError(t, err)
	require.False(t, c2.Reused)
	require.NotEqual(t, c.Server.Pid(), c2.Server.Pid())
	require.Equal(t, 4, p.Starts())

	// Discard stops it at once; the key starts anew.
	require.NoError(t, c2.Discard(ctx, "test"))
	requireGone(t, c2.Server)
	require.Equal(t, 0, p.Running())
	c2.Release() // a no-op after Discard

	d, err := p.Acquire(ctx, "ck-d", sleeper(t, &starts))
	require.NoError(t, err)
	require.NoError(t, p.Close(ctx), "a held server too")
	requireGone(t, d.Server)
	require.NoError(t, p.Close(ctx), "idempotent")
	_, err = p.Acquire(ctx, "ck-d", sleeper(t, &starts))
	require.ErrorIs(t, err, serving.ErrPoolClosed)
	d.Release()
	require.Equal(t, 5, starts)
}

// TestPoolStartError: a failed start keeps nothing and counts no start.
func TestPoolStartError(t *testing.T) {
	p := &serving.Pool{}
	_, err := p.Acquire(context.Background(), "k", func() (*serving.Server, error) {
		return serving.Start([]string{"/nonexistent/vllm"}, filepath.Join(t.TempDir(), "s.log"), nil)
	})
	require.ErrorContains(t, err, "/nonexistent/vllm")
	require.Equal(t, 0, p.Starts())
	require.Equal(t, 0, p.Running())
}

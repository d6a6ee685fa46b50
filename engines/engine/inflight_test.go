package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline/config"
)

// TestLimiterOrder: with every place taken, waiting tasks get the places
// freed in Key order (part, then seq), whatever order they arrived in; a
// task whose ctx ends while waiting leaves the queue and holds nothing.
func TestLimiterOrder(t *testing.T) {
	l := NewLimiter(1)
	require.NoError(t, l.Acquire(context.Background(), Key{}))
	keys := []Key{{2, 0}, {1, 5}, {1, 2}, {0, 9}, {2, 1}}
	var mu sync.Mutex
	var got []Key
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			require.NoError(t, l.Acquire(context.Background(), k))
			mu.Lock()
			got = append(got, k)
			mu.Unlock()
			l.Release()
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() { gone <- l.Acquire(ctx, Key{0, 0}) }()
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.waiting) == len(keys)+1
	}, 5*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-gone, context.Canceled)
	l.Release()
	wg.Wait()
	require.Equal(t, []Key{{0, 9}, {1, 2}, {1, 5}, {2, 0}, {2, 1}}, got)
	require.Equal(t, 1, l.Peak())
	l.mu.Lock()
	require.Equal(t, 0, l.held)
	l.mu.Unlock()
}

// TestInFlightSizes: tasks in flight follow model.concurrency, sandbox
// slots cover both the tasks and the workers, and enough parts run at
// once to fill the places with one to spare.
func TestInFlightSizes(t *testing.T) {
	cfg := config.Default()
	cfg.Workers, cfg.Model.Concurrency = 2, 128
	e := &Engines{Config: &cfg}
	require.Equal(t, 128, e.InFlight())
	require.Equal(t, 128, e.SandboxSlots())
	require.Equal(t, 128, e.Tasks().Cap())
	require.Equal(t, 2, e.CPU().Cap())
	require.Equal(t, 3, e.PartsInFlight(128)) // 8 environments x 16 plays
	require.Equal(t, 5, e.PartsInFlight(64))
	require.Equal(t, 33, e.PartsInFlight(8)) // 8 design slots a part
	cfg.Model.Concurrency = 1
	require.Equal(t, 2, (&Engines{Config: &cfg}).SandboxSlots())
	require.Equal(t, 3, (&Engines{Config: &cfg}).PartsInFlight(128))
}

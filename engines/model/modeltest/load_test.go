package modeltest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadRejectsBadShapes(t *testing.T) {
	call := func(int64) error { return nil }
	for _, l := range []Load{
		{Concurrency: 0, Calls: 1, Call: call},
		{Concurrency: 1, Calls: 0, Call: call},
		{Concurrency: 1, Warmup: -1, Calls: 1, Call: call},
		{Concurrency: 1, Calls: 1},
	} {
		_, err := l.Run()
		assert.Error(t, err, "%+v", l)
	}
}

// The window runs from the Warmup-th to the (Warmup+Calls)-th completion:
// slow calls outside it (the drain) do not stretch it, and the edges run
// once each, opening first.
func TestLoadWindowExcludesDrain(t *testing.T) {
	const conc, warm, calls = 4, 8, 16
	var started atomic.Int64
	var mu sync.Mutex
	var edges []bool
	l := Load{Concurrency: conc, Warmup: warm, Calls: calls,
		Call: func(seq int64) error {
			started.Add(1)
			if seq >= warm+calls {
				time.Sleep(300 * time.Millisecond) // drain: started after the window's last start
			} else {
				time.Sleep(5 * time.Millisecond)
			}
			return nil
		},
		Edge: func(end bool) {
			mu.Lock()
			edges = append(edges, end)
			mu.Unlock()
		}}
	t0 := time.Now()
	wall, err := l.Run()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(t0), 300*time.Millisecond, "Run waits for the calls in flight")
	// 16 calls of 5 ms on 4 callers: 4 rounds, 20 ms; far below the drain.
	assert.GreaterOrEqual(t, wall, 15*time.Millisecond)
	assert.Less(t, wall, 250*time.Millisecond, "the drain was counted")
	assert.Equal(t, []bool{false, true}, edges)
	assert.LessOrEqual(t, started.Load(), int64(warm+calls+conc), "at most one call per caller after the window")
}

func TestLoadReturnsFirstError(t *testing.T) {
	boom := errors.New("boom")
	var n atomic.Int64
	_, err := Load{Concurrency: 3, Calls: 1000, Call: func(seq int64) error {
		n.Add(1)
		if seq == 5 {
			return boom
		}
		time.Sleep(time.Millisecond)
		return nil
	}}.Run()
	require.ErrorIs(t, err, boom)
	assert.Contains(t, err.Error(), "call 5")
	assert.Less(t, n.Load(), int64(1000), "the load stops after an error")
}

// Against a server with a fixed latency the window rate cannot beat
// concurrency/latency and, with nothing else to do, comes close to it.
func TestLoadAgainstServer(t *testing.T) {
	const conc, latency = 8, 40 * time.Millisecond
	s := Start(t, WithLatency(latency), WithoutRecording())
	client := newTestClient()
	defer client.CloseIdleConnections()
	wall, err := Load{Concurrency: conc, Warmup: 2 * conc, Calls: 5 * conc, Call: func(int64) error {
		return postWith(client, s, `{"model":"m","messages":[{"role":"user","content":"x"}]}`)
	}}.Run()
	require.NoError(t, err)
	rate := float64(5*conc) / wall.Seconds()
	ideal := float64(conc) / latency.Seconds()
	assert.LessOrEqual(t, rate, ideal*1.02, "faster than the latency allows: the window is wrong")
	assert.Greater(t, rate, ideal*0.5)
	assert.LessOrEqual(t, s.MaxInFlight(), conc)
}

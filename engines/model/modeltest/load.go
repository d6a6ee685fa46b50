package modeltest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Load describes a closed-loop load for throughput benchmarks: Concurrency
// callers each make one call after another, and the achieved rate is read
// in a window of completions after a warm-up, never from the first start
// to the last finish.
//
// Why a window of completions: from first start to last finish counts the
// ramp-up (connections, first GC cycles) and the drain (the last calls in
// flight finish one by one while the other callers sit idle) as if they
// were steady state. Why whole multiples of Concurrency: against a server
// with a fixed latency the callers complete in clumps of up to Concurrency
// calls once per latency; a window that is a fixed stretch of time would
// count one clump more or less depending on where it starts (1/40 of the
// calls in a 2 s window at 50 ms), while a window from the Warmup-th to the
// (Warmup+Calls)-th completion spans whole periods when both are multiples
// of Concurrency.
type Load struct {
	// Concurrency is the number of callers (at least 1).
	Concurrency int
	// Warmup is the number of completions before the window opens.
	Warmup int
	// Calls is the number of completions inside the window (at least 1).
	Calls int
	// Call makes call number seq (0, 1, 2, ... in start order). An error
	// stops the load and is returned by Run.
	Call func(seq int64) error
	// Edge, when set, runs as the window opens (end false) and closes (end
	// true), on the goroutine whose call completed it, so that a caller
	// can read CPU counters at exactly the window's edges.
	Edge func(end bool)
}

// Run runs the load until Warmup+Calls calls have completed, lets the calls
// still in flight finish (they are outside the window), and returns the
// window's wall-clock duration. Errors: a bad Load, or the first error of
// a Call, wrapped with its sequence number.
func (l Load) Run() (time.Duration, error) {
	if l.Concurrency < 1 || l.Warmup < 0 || l.Calls < 1 || l.Call == nil {
		return 0, errors.New("modeltest load: Concurrency and Calls must be at least 1, Warmup not negative, Call set")
	}
	k0, k1 := int64(l.Warmup), int64(l.Warmup+l.Calls)
	var (
		seq, done  atomic.Int64
		failed     atomic.Bool
		errOnce    sync.Once
		firstErr   error
		start, end time.Time
		wg         sync.WaitGroup
	)
	// The closing edge waits for the opening one, which a slow Edge(false)
	// could otherwise overlap when Calls is small.
	opened := make(chan struct{})
	edge := func(k int64) {
		switch k {
		case k0:
			start = time.Now()
			if l.Edge != nil {
				l.Edge(false)
			}
			close(opened)
		case k1:
			<-opened
			end = time.Now()
			if l.Edge != nil {
				l.Edge(true)
			}
		}
	}
	edge(0) // Warmup 0 opens the window before the first call
	for range l.Concurrency {
		wg.Go(func() {
			for !failed.Load() && done.Load() < k1 {
				n := seq.Add(1) - 1
				if err := l.Call(n); err != nil {
					errOnce.Do(func() { firstErr = fmt.Errorf("modeltest load: call %d: %w", n, err) })
					failed.Store(true)
					return
				}
				edge(done.Add(1))
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return end.Sub(start), nil
}

package engine

import (
	"container/heap"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spade-pipeline/spade/engines/sandbox"
)

// Limiter bounds how many tasks (plays, design slots, hint calls) are in
// flight at once across every part a process runs, and hands free places
// to the waiting task with the smallest Key first, not to whichever
// goroutine the scheduler wakes. The order is what keeps a model server
// busy across parts: the parts in flight are not served round-robin (which
// would bring them to their tails together, with the next part's tasks
// waiting behind them) but one after the other, so the lowest part ends
// first and the next part's tasks take over its places while the others
// still have plenty queued. Which task gets a place never changes what a
// task computes, so the order is free to be chosen for throughput alone.
// Safe for concurrent use.
type Limiter struct {
	mu      sync.Mutex
	cap     int
	held    int
	waiting waiters
	peak    int
}

// Key orders waiting tasks: by Part, then by Seq (both ascending).
type Key struct {
	// Part is the stage part the task belongs to.
	Part int
	// Seq orders the tasks of one part.
	Seq int
}

func (k Key) less(o Key) bool {
	if k.Part != o.Part {
		return k.Part < o.Part
	}
	return k.Seq < o.Seq
}

type waiter struct {
	key   Key
	ready chan struct{}
	index int // in the heap; -1 once granted or withdrawn
}

type waiters []*waiter

func (w waiters) Len() int           { return len(w) }
func (w waiters) Less(i, j int) bool { return w[i].key.less(w[j].key) }
func (w waiters) Swap(i, j int) {
	w[i], w[j] = w[j], w[i]
	w[i].index, w[j].index = i, j
}
func (w *waiters) Push(x any) {
	it := x.(*waiter)
	it.index = len(*w)
	*w = append(*w, it)
}
func (w *waiters) Pop() any {
	old := *w
	it := old[len(old)-1]
	old[len(old)-1] = nil
	it.index = -1
	*w = old[:len(old)-1]
	return it
}

// NewLimiter returns a Limiter with n places (n >= 1; smaller is 1).
func NewLimiter(n int) *Limiter { return &Limiter{cap: max(1, n)} }

// Cap returns the number of places.
func (l *Limiter) Cap() int { return l.cap }

// Peak returns the most places that were held at once so far.
func (l *Limiter) Peak() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.peak
}

// Acquire waits for a place, served in Key order among the waiting tasks.
// Errors: ctx.Err() when ctx ends first (no place is then held).
func (l *Limiter) Acquire(ctx context.Context, k Key) error {
	l.mu.Lock()
	if l.held < l.cap && len(l.waiting) == 0 {
		l.held++
		l.peak = max(l.peak, l.held)
		l.mu.Unlock()
		return nil
	}
	w := &waiter{key: k, ready: make(chan struct{})}
	heap.Push(&l.waiting, w)
	l.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		if w.index < 0 {
			// Granted while ctx ended: pass the place on.
			l.releaseLocked()
		} else {
			heap.Remove(&l.waiting, w.index)
		}
		return ctx.Err()
	}
}

// Release frees a place taken by Acquire.
func (l *Limiter) Release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.releaseLocked()
}

func (l *Limiter) releaseLocked() {
	if len(l.waiting) > 0 {
		w := heap.Pop(&l.waiting).(*waiter)
		close(w.ready) // the place passes to w: held is unchanged
		return
	}
	l.held--
}

// InFlight is how many model-calling tasks a process keeps in flight:
// plays of the rollout stage, slots of the design stage, hint calls.
// It is model.concurrency (docs/design.md "Model calls in flight": model calls are bounded by
// model.concurrency, not by the CPU count), at most the sandbox slots a
// process may have (a play holds its loaded program between its turns):
// sandbox.UIDStride (512) as root, where each slot runs under a uid of
// its own.
func (e *Engines) InFlight() int {
	n := max(1, e.Config.Model.Concurrency)
	if isRoot() {
		n = min(n, sandbox.UIDStride)
	}
	return n
}

// SandboxSlots is the number of sandbox slots (programs loaded at once):
// one per task in flight (InFlight), and at least Workers for the CPU-bound
// validate stage. Slots start their sandbox lazily, at their first program,
// so slots no task reaches cost nothing.
func (e *Engines) SandboxSlots() int {
	n := max(e.Workers(), e.InFlight())
	if isRoot() {
		n = min(n, sandbox.UIDStride)
	}
	return n
}

// Tasks returns the process's Limiter of InFlight places, shared by every
// part and stage this process runs, so parts in flight together keep
// model.concurrency tasks in flight between them, not each.
func (e *Engines) Tasks() *Limiter {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tasks == nil {
		e.tasks = NewLimiter(e.InFlight())
	}
	return e.tasks
}

// CPU returns the process's Limiter of Workers places for CPU-bound work
// that model-calling tasks do between their calls (the design stage's
// quick check of a generated program, the rollout stage's resets and
// steps), so that workers, not model.concurrency, bounds it.
func (e *Engines) CPU() *Limiter {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cpu == nil {
		e.cpu = NewLimiter(e.Workers())
	}
	return e.cpu
}

// PartsInFlight is how many parts of a stage whose parts hold perPart
// model-calling tasks each (at most) the runner should run at once, and
// at least workers: k = ceil(InFlight / perPart) parts fill the places,
// but the first places go to whichever tasks arrive first, spread over
// the parts that start together, which then reach their tails together;
// 2k + 1 parts keep enough tasks queued behind them that the places
// freed by those tails pass, lowest part first, to queued tasks while at
// least InFlight tasks remain.
func (e *Engines) PartsInFlight(perPart int) int {
	k := (e.InFlight() + max(1, perPart) - 1) / max(1, perPart)
	return max(e.Workers(), 2*k+1)
}

// CallMeter counts the model calls of a process as they happen: calls in
// flight (made through a StageModel and not yet answered, backoff waits
// included) and calls finished, for progress displays and the stage log.
// Safe for concurrent use; the zero value is ready.
type CallMeter struct {
	inFlight atomic.Int64
	done     atomic.Int64
}

// InFlight returns the calls started and not finished.
func (m *CallMeter) InFlight() int64 { return m.inFlight.Load() }

// Done returns the calls finished, successful or not.
func (m *CallMeter) Done() int64 { return m.done.Load() }

// Calls returns the process's CallMeter.
func (e *Engines) Calls() *CallMeter { return &e.meter }

// CallRate is one reading of a CallMeter against the previous one: calls
// in flight now and calls finished per second since then.
type CallRate struct {
	// InFlight is the calls in flight now.
	InFlight int64
	// PerSecond is the calls finished per second since the last reading.
	PerSecond float64
	// Concurrency is the bound on InFlight: model.concurrency, or the
	// sandbox slots a process may have when that is fewer
	// (Engines.InFlight).
	Concurrency int
}

// String formats the reading for a progress line, e.g. "calls in flight
// 127/128, 402 calls/s".
func (r CallRate) String() string {
	return fmt.Sprintf("calls in flight %d/%d, %.0f calls/s", r.InFlight, r.Concurrency, r.PerSecond)
}

// RateReader reads a CallMeter at intervals.
type RateReader struct {
	e     *Engines
	conc  int
	last  int64
	lastT time.Time
}

// NewRateReader starts reading the process's CallMeter now.
func (e *Engines) NewRateReader() *RateReader {
	return &RateReader{e: e, conc: e.InFlight(), last: e.meter.Done(), lastT: time.Now()}
}

// Read returns the calls in flight and the rate since the previous Read.
// Calls in flight are the backend's HTTP requests in flight where it
// counts them (openai.Backend.InFlight: what the server sees), else the
// CallMeter's.
func (r *RateReader) Read() CallRate {
	now, done := time.Now(), r.e.meter.Done()
	rate := CallRate{InFlight: r.e.meter.InFlight(), Concurrency: r.conc}
	r.e.mu.Lock()
	counted, n := false, 0
	for _, b := range r.e.backends {
		if c, ok := b.(interface{ InFlight() int }); ok {
			counted, n = true, n+c.InFlight()
		}
	}
	r.e.mu.Unlock()
	if counted && r.e.Config.Model.Replay == "" {
		rate.InFlight = int64(n)
	}
	if dt := now.Sub(r.lastT).Seconds(); dt > 0 {
		rate.PerSecond = float64(done-r.last) / dt
	}
	r.last, r.lastT = done, now
	return rate
}

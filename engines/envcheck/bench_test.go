package envcheck

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/sourcegraph/conc/pool"

	"github.com/spade-pipeline/spade/engines/sandbox"
)

// BenchmarkCheck measures full validations per second of a small valid
// environment (docs/examples/guess_game.py), two at a time on two sandbox
// slots. Target (docs/sandbox.md): >= 50 validations/s.
func BenchmarkCheck(b *testing.B) {
	src, err := os.ReadFile("../../docs/examples/guess_game.py")
	if err != nil {
		b.Fatal(err)
	}
	sb, err := sandbox.New(sandbox.Config{Workers: 2})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close()
	b.ResetTimer()
	self0, child0 := cpuNow()
	p := pool.New().WithMaxGoroutines(2)
	for range b.N {
		p.Go(func() {
			if rep := Check(context.Background(), sb, string(src), Options{}); !rep.Valid {
				b.Errorf("example invalid: %s", rep.Reason)
			}
		})
	}
	p.Wait()
	self1, child1 := cpuNow()
	per := ((self1 - self0) + (child1 - child0)).Seconds() / float64(b.N)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "validations/s")
	b.ReportMetric(per*1e3, "cpu-ms/validation")
	b.ReportMetric(2/per, "cpu-bound-validations/s-2cores")
}

// cpuNow is the CPU time of this process and its reaped children (closed
// sandboxes included), so cost is measurable on a loaded shared machine.
func cpuNow() (self, children time.Duration) {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	children = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return self, children
}

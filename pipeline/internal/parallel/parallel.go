// Package parallel runs indexed work on a bounded number of goroutines
// with a result that does not depend on scheduling: table.Decode's row
// groups and pipeline.ReadManifestRows's files.
package parallel

import (
	"math"
	"sync/atomic"

	"github.com/sourcegraph/conc"
)

// Each calls fn(i) for i in [0, n) on min(workers, n) goroutines (at least
// one), each taking the lowest index not yet taken. After a failure no
// index above the lowest failed one is started, and every index below it
// has run, so the error returned, that of the lowest failed index, does
// not depend on scheduling; nil when every call succeeded. A panic in fn is
// re-raised in the caller.
func Each(n, workers int, fn func(i int) error) error {
	errs := make([]error, n)
	var next atomic.Int64
	var lowestFailed atomic.Int64
	lowestFailed.Store(math.MaxInt64)
	var wg conc.WaitGroup
	for range max(1, min(workers, n)) {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || i > lowestFailed.Load() {
					return
				}
				if errs[i] = fn(int(i)); errs[i] != nil {
					for {
						low := lowestFailed.Load()
						if i >= low || lowestFailed.CompareAndSwap(low, i) {
							break
						}
					}
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

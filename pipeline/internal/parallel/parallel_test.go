package parallel

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestEachRunsEveryIndexOnce(t *testing.T) {
	for _, workers := range []int{0, 1, 3, 64} {
		var calls [100]atomic.Int32
		require.NoError(t, Each(len(calls), workers, func(i int) error {
			calls[i].Add(1)
			return nil
		}))
		for i := range calls {
			require.EqualValues(t, 1, calls[i].Load(), "workers %d index %d", workers, i)
		}
	}
	require.NoError(t, Each(0, 4, func(int) error { panic("no index to run") }))
}

// TestEachLowestErrorWins makes index 3 fail last and index 7 fail first:
// index 3's error is returned whatever the scheduling.
func TestEachLowestErrorWins(t *testing.T) {
	for range 20 {
		err := Each(50, 4, func(i int) error {
			switch i {
			case 3:
				time.Sleep(20 * time.Millisecond)
				return fmt.Errorf("index %d", i)
			case 7:
				return fmt.Errorf("index %d", i)
			}
			return nil
		})
		require.EqualError(t, err, "index 3")
	}
}

// TestEachStopsAfterFailure: no index above a recorded failure starts. With
// one goroutine the order is fixed, so exactly indexes 0-7 run. (With
// several, how many others started before the failure was recorded
// depends on scheduling, which a test on a loaded machine cannot bound.)
func TestEachStopsAfterFailure(t *testing.T) {
	var started atomic.Int32
	err := Each(50, 1, func(i int) error {
		started.Add(1)
		if i == 7 {
			return fmt.Errorf("index %d", i)
		}
		return nil
	})
	require.EqualError(t, err, "index 7")
	require.EqualValues(t, 8, started.Load())
}

func TestEachPanicReachesCaller(t *testing.T) {
	require.Panics(t, func() {
		_ = Each(4, 2, func(i int) error {
			if i == 2 {
				panic(errors.New("boom"))
			}
			return nil
		})
	})
}

package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/memstore"
)

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// leaseStore is a fresh mem:// store for one test.
func leaseStore(t *testing.T) storage.Store {
	t.Helper()
	s := memstore.New(t.Name())
	t.Cleanup(func() { memstore.Forget(t.Name()) })
	return s
}

func putLease(t *testing.T, s storage.Store, run string, l Lease) []byte {
	t.Helper()
	b, err := json.Marshal(l)
	require.NoError(t, err)
	require.NoError(t, storage.PutBytes(context.Background(), s, LeaseKey(run), b))
	return b
}

func readLease(t *testing.T, s storage.Store, run string) Lease {
	t.Helper()
	b, err := storage.ReadAll(context.Background(), s, LeaseKey(run))
	require.NoError(t, err)
	var l Lease
	require.NoError(t, json.Unmarshal(b, &l))
	return l
}

// sleeper starts a child process that runs until the test ends (or it is
// killed) and returns its pid and start time.
func sleeper(t *testing.T) (*exec.Cmd, int, uint64) {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	st, ok := procStat(cmd.Process.Pid)
	require.True(t, ok, "read /proc/%d/stat", cmd.Process.Pid)
	return cmd, cmd.Process.Pid, st.start
}

// deadPID returns the pid of a child process that has exited and been
// reaped, and the start time it had.
func deadPID(t *testing.T) (int, uint64) {
	t.Helper()
	cmd, pid, start := sleeper(t)
	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()
	exists, _ := probeProcess(pid)
	require.False(t, exists, "pid %d still exists after kill and wait", pid)
	return pid, start
}

// TestLeaseStaleOnThisHost: a lease whose holder was a process of this host
// that no longer runs (SIGKILL, OOM) is taken over at once, long before it
// expires, in the current format and in the format of older builds (host
// and pid only). Live holders and holders of other hosts keep it.
func TestLeaseStaleOnThisHost(t *testing.T) {
	ctx := context.Background()
	here := localProcess()
	require.NotEmpty(t, here.host)
	dead, deadStart := deadPID(t)
	_, live, liveStart := sleeper(t)
	later := time.Now().Add(6 * time.Hour).UTC()
	cases := []struct {
		name  string
		held  Lease
		taken bool
	}{
		{"dead pid", Lease{Holder: "h-dead", Host: here.host, PID: dead, MachineID: here.machineID, BootID: here.bootID, PIDNamespace: here.pidNS, Start: deadStart, Expires: later}, true},
		{"dead pid, lease of an older build", Lease{Holder: "h-old", Host: here.host, PID: dead, Expires: later}, true},
		{"pid reused by another process", Lease{Holder: "h-reused", Host: here.host, PID: live, MachineID: here.machineID, BootID: here.bootID, PIDNamespace: here.pidNS, Start: liveStart + 1, Expires: later}, true},
		{"live holder", Lease{Holder: "h-live", Host: here.host, PID: live, MachineID: here.machineID, BootID: here.bootID, PIDNamespace: here.pidNS, Start: liveStart, Expires: later}, false},
		{"live holder, lease of an older build", Lease{Holder: "h-live-old", Host: here.host, PID: live, Expires: later}, false},
		{"dead pid on another host", Lease{Holder: "h-other", Host: here.host + "-other", PID: dead, Expires: later}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := leaseStore(t)
			putLease(t, s, "r", c.held)
			release, err := AcquireLease(ctx, s, "r", 3600, quietLog())
			if !c.taken {
				require.ErrorIs(t, err, ErrBusy)
				require.Contains(t, err.Error(), c.held.Holder)
				require.Equal(t, c.held.Holder, readLease(t, s, "r").Holder, "the lease is untouched")
				return
			}
			require.NoError(t, err)
			got := readLease(t, s, "r")
			require.NotEqual(t, c.held.Holder, got.Holder)
			require.Equal(t, here.pid, got.PID)
			require.Equal(t, here.start, got.Start)
			require.Equal(t, here.bootID, got.BootID)
			release()
			_, err = s.Stat(ctx, LeaseKey("r"))
			require.ErrorIs(t, err, storage.ErrNotFound, "released")
			infos, err := s.List(ctx, "r/")
			require.NoError(t, err)
			require.Empty(t, infos, "no takeover claim is left behind")
		})
	}
}

// TestStaleHolder covers the host, machine, boot and pid-namespace rules of
// staleHolder with a fake process table.
func TestStaleHolder(t *testing.T) {
	here := process{host: "vm", machineID: "m1", bootID: "b1", pidNS: "pid:[1]", pid: 100, start: 500}
	probe := func(pid int) (bool, uint64) {
		switch pid {
		case 7:
			return true, 70
		case 8:
			return true, 0 // alive, start time unknown
		}
		return false, 0
	}
	base := Lease{Host: "vm", MachineID: "m1", BootID: "b1", PIDNamespace: "pid:[1]", PID: 7, Start: 70}
	with := func(f func(*Lease)) Lease { l := base; f(&l); return l }
	cases := []struct {
		name  string
		held  Lease
		stale bool
	}{
		{"live", base, false},
		{"dead", with(func(l *Lease) { l.PID = 9 }), true},
		{"reused pid", with(func(l *Lease) { l.Start = 71 }), true},
		{"start unknown", with(func(l *Lease) { l.PID = 8 }), false},
		{"other host", with(func(l *Lease) { l.Host = "vm2"; l.PID = 9 }), false},
		{"no host", with(func(l *Lease) { l.Host = ""; l.PID = 9 }), false},
		{"same name, other machine", with(func(l *Lease) { l.MachineID = "m2"; l.PID = 9 }), false},
		{"rebooted", with(func(l *Lease) { l.BootID = "b0" }), true},
		{"other boot, machine unknown", with(func(l *Lease) { l.BootID = "b0"; l.MachineID = "" }), false},
		{"other pid namespace", with(func(l *Lease) { l.PIDNamespace = "pid:[2]"; l.PID = 9 }), false},
		{"older build, dead", Lease{Host: "vm", PID: 9}, true},
		{"older build, alive", Lease{Host: "vm", PID: 7}, false},
		{"pid 0", with(func(l *Lease) { l.PID = 0 }), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			why := here.staleHolder(c.held, probe)
			require.Equal(t, c.stale, why != "", "why: %q", why)
		})
	}
}

// hookStore calls afterGet after every successful Get.
type hookStore struct {
	storage.Store
	afterGet func(ctx context.Context, key string)
}

func (h hookStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := h.Store.Get(ctx, key)
	if err == nil {
		h.afterGet(ctx, key)
	}
	return rc, err
}

type takerKey struct{}

// TestLeaseTakeoverRace: two invocations find the same stale lease; the
// first is paused right after it read the lease while the second takes it
// over. The first must then see the second's live lease and be busy, not
// delete it and hold the lease too.
func TestLeaseTakeoverRace(t *testing.T) {
	ctx := context.Background()
	mem := leaseStore(t)
	putLease(t, mem, "r", Lease{Holder: "h-expired", Host: "elsewhere", PID: 1, Expires: time.Now().Add(-time.Minute)})
	read, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s := hookStore{Store: mem, afterGet: func(ctx context.Context, key string) {
		if key == LeaseKey("r") && ctx.Value(takerKey{}) == "first" {
			once.Do(func() { close(read); <-resume })
		}
	}}
	type outcome struct {
		release func()
		err     error
	}
	first := make(chan outcome, 1)
	go func() {
		rel, err := AcquireLease(context.WithValue(ctx, takerKey{}, "first"), s, "r", 3600, quietLog())
		first <- outcome{rel, err}
	}()
	<-read
	releaseSecond, err := AcquireLease(ctx, s, "r", 3600, quietLog())
	require.NoError(t, err, "the second invocation takes the expired lease over")
	second := readLease(t, mem, "r").Holder
	close(resume)
	got := <-first
	if got.err == nil {
		got.release()
	}
	require.ErrorIs(t, got.err, ErrBusy, "the first invocation must not take over the lease the second now holds")
	require.Equal(t, second, readLease(t, mem, "r").Holder)
	releaseSecond()
	infos, err := mem.List(ctx, "r/")
	require.NoError(t, err)
	require.Empty(t, infos, "lease released and no takeover claim left behind")
}

// TestLeaseTakeoverClaims: a stale lease with a live claim of another
// taker is busy; an abandoned claim (its process is gone) is passed over.
func TestLeaseTakeoverClaims(t *testing.T) {
	ctx := context.Background()
	here := localProcess()
	dead, deadStart := deadPID(t)
	_, live, liveStart := sleeper(t)
	stale := Lease{Holder: "h-expired", Host: "elsewhere", PID: 1, Expires: time.Now().Add(-time.Minute)}
	claimOf := func(pid int, start uint64) []byte {
		b, _ := json.Marshal(Lease{Holder: "taker", Host: here.host, PID: pid, MachineID: here.machineID, BootID: here.bootID, PIDNamespace: here.pidNS, Start: start, Expires: time.Now().Add(time.Hour)})
		return b
	}
	t.Run("live claim", func(t *testing.T) {
		s := leaseStore(t)
		old := putLease(t, s, "r", stale)
		require.NoError(t, storage.PutBytes(ctx, s, TakeoverClaimKey("r", old, 0), claimOf(live, liveStart)))
		_, err := AcquireLease(ctx, s, "r", 3600, quietLog())
		require.ErrorIs(t, err, ErrBusy)
		require.Contains(t, err.Error(), "taking it over")
		require.Equal(t, "h-expired", readLease(t, s, "r").Holder)
	})
	t.Run("abandoned claim", func(t *testing.T) {
		s := leaseStore(t)
		old := putLease(t, s, "r", stale)
		require.NoError(t, storage.PutBytes(ctx, s, TakeoverClaimKey("r", old, 0), claimOf(dead, deadStart)))
		release, err := AcquireLease(ctx, s, "r", 3600, quietLog())
		require.NoError(t, err)
		require.Equal(t, here.pid, readLease(t, s, "r").PID)
		release()
		infos, err := s.List(ctx, "r/")
		require.NoError(t, err)
		require.Empty(t, infos)
	})
}

// TestLeaseRenewalKeepsATakenOverLease: once another invocation holds the
// lease, the old holder's renewal must not write over it.
func TestLeaseRenewalKeepsATakenOverLease(t *testing.T) {
	ctx := context.Background()
	s := leaseStore(t)
	release, err := AcquireLease(ctx, s, "r", 0.6, quietLog()) // renews every 200 ms
	require.NoError(t, err)
	defer release()
	putLease(t, s, "r", Lease{Holder: "h-new", Host: "elsewhere", PID: 1, Expires: time.Now().Add(time.Hour)})
	time.Sleep(500 * time.Millisecond) // two renewals
	require.Equal(t, "h-new", readLease(t, s, "r").Holder)
}

// TestLeaseTTL: a TTL that is not a positive number of seconds that fits a
// time.Duration is refused before the store is touched.
func TestLeaseTTL(t *testing.T) {
	s := leaseStore(t)
	for _, ttl := range []float64{0, -1, 1e300} {
		_, err := AcquireLease(context.Background(), s, "r", ttl, quietLog())
		require.Error(t, err, "ttl %g", ttl)
	}
	infos, err := s.List(context.Background(), "r/")
	require.NoError(t, err)
	require.Empty(t, infos)
}

// TestLeaseLostFences: a holder whose lease another invocation has taken
// over (it was stopped past the expiry) learns it at its next Check, and
// its renewal cancels the lease's context with ErrLeaseLost, so that the
// round it runs stops instead of committing beside the new holder's.
func TestLeaseLostFences(t *testing.T) {
	ctx := context.Background()
	t.Run("check", func(t *testing.T) {
		s := leaseStore(t)
		l, err := TakeLease(ctx, s, "r", 3600, quietLog())
		require.NoError(t, err)
		defer l.Release()
		require.NoError(t, l.Check(ctx))
		require.NoError(t, l.Context().Err())
		putLease(t, s, "r", Lease{Holder: "h-new", Host: "elsewhere", PID: 7, Expires: time.Now().Add(time.Hour)})
		err = l.Check(ctx)
		require.ErrorIs(t, err, ErrLeaseLost)
		require.Contains(t, err.Error(), "h-new")
		require.ErrorIs(t, context.Cause(l.Context()), ErrLeaseLost)
		l.Release()
		require.Equal(t, "h-new", readLease(t, s, "r").Holder, "release keeps the new holder's lease")
	})
	t.Run("renewal", func(t *testing.T) {
		s := leaseStore(t)
		l, err := TakeLease(ctx, s, "r", 0.3, quietLog()) // renews every 100 ms
		require.NoError(t, err)
		defer l.Release()
		putLease(t, s, "r", Lease{Holder: "h-new", Host: "elsewhere", PID: 7, Expires: time.Now().Add(time.Hour)})
		select {
		case <-l.Context().Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the lease's context is not cancelled after the lease was taken over")
		}
		require.ErrorIs(t, context.Cause(l.Context()), ErrLeaseLost)
	})
	t.Run("removed", func(t *testing.T) {
		s := leaseStore(t)
		l, err := TakeLease(ctx, s, "r", 3600, quietLog())
		require.NoError(t, err)
		defer l.Release()
		require.NoError(t, s.Delete(ctx, LeaseKey("r")))
		require.ErrorIs(t, l.Check(ctx), ErrLeaseLost)
	})
	t.Run("release", func(t *testing.T) {
		s := leaseStore(t)
		l, err := TakeLease(ctx, s, "r", 3600, quietLog())
		require.NoError(t, err)
		l.Release()
		l.Release()
		require.Error(t, l.Context().Err())
		require.NotErrorIs(t, context.Cause(l.Context()), ErrLeaseLost)
		infos, err := s.List(ctx, "r/")
		require.NoError(t, err)
		require.Empty(t, infos)
	})
}

// outageStore fails every Get and Delete with a connection error while
// failing returns true for it, as a store that is down; other calls pass.
type outageStore struct {
	storage.Store
	failing func(op string) bool
}

var errOutage = errors.New("injected outage: dial tcp 127.0.0.1:7070: connect: connection refused")

func (o outageStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if o.failing("get") {
		return nil, fmt.Errorf("get %s: %w", key, errOutage)
	}
	return o.Store.Get(ctx, key)
}

func (o outageStore) Delete(ctx context.Context, key string) error {
	if o.failing("delete") {
		return fmt.Errorf("delete %s: %w", key, errOutage)
	}
	return o.Store.Delete(ctx, key)
}

// failFirst returns a failing func for outageStore that fails the first n
// calls of op (every op when op is "") and counts the calls it failed.
func failFirst(op string, n int32) (failing func(string) bool, failed *atomic.Int32) {
	failed = &atomic.Int32{}
	var calls atomic.Int32
	return func(o string) bool {
		if op != "" && o != op {
			return false
		}
		if calls.Add(1) > n {
			return false
		}
		failed.Add(1)
		return true
	}, failed
}

// TestLeaseReleaseRetries: a store that is still down when the holder
// releases its lease (the round failed on the same outage) must not leave
// the lease behind for a whole TTL: release retries until the store
// answers, and is prompt when it answers at once.
func TestLeaseReleaseRetries(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		op   string
		n    int32
	}{
		{"store answers at once", "", 0},
		{"reads fail three times", "get", 3},
		{"the delete fails twice", "delete", 2},
		{"everything fails four times", "", 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			mem := leaseStore(t)
			var broken atomic.Bool
			failing, failed := failFirst(c.op, c.n)
			s := outageStore{Store: mem, failing: func(op string) bool { return broken.Load() && failing(op) }}
			l, err := TakeLease(ctx, s, "r", 3600, quietLog())
			require.NoError(t, err)
			broken.Store(true)
			start := time.Now()
			l.Release()
			took := time.Since(start)
			_, err = mem.Stat(ctx, LeaseKey("r"))
			require.ErrorIs(t, err, storage.ErrNotFound, "the lease is released once the store answers again")
			require.EqualValues(t, c.n, failed.Load(), "injected failures")
			if c.n == 0 {
				require.Less(t, took, 500*time.Millisecond, "a healthy store releases at once")
			}
			require.Less(t, took, 10*time.Second)
		})
	}
}

// TestLeaseReleaseKeepsAnotherHolders: release retries never delete a
// lease that names another holder by the time the store answers.
func TestLeaseReleaseKeepsAnotherHolders(t *testing.T) {
	ctx := context.Background()
	mem := leaseStore(t)
	var broken atomic.Bool
	failing, _ := failFirst("get", 2)
	s := outageStore{Store: mem, failing: func(op string) bool { return broken.Load() && failing(op) }}
	l, err := TakeLease(ctx, s, "r", 3600, quietLog())
	require.NoError(t, err)
	putLease(t, mem, "r", Lease{Holder: "h-new", Host: "elsewhere", PID: 7, Expires: time.Now().Add(time.Hour)})
	broken.Store(true)
	l.Release()
	require.Equal(t, "h-new", readLease(t, mem, "r").Holder)
}

// TestLeaseReleaseGivesUp: when the store stays down, release gives up
// after its budget (shorter when the lease's context has ended, as after
// SIGTERM) and logs an error that names the key, says when another
// invocation may take the lease over and how to delete it by hand.
func TestLeaseReleaseGivesUp(t *testing.T) {
	ctx := context.Background()
	defer func(b, ib time.Duration) { leaseReleaseBudget, leaseReleaseInterruptedBudget = b, ib }(leaseReleaseBudget, leaseReleaseInterruptedBudget)
	leaseReleaseBudget, leaseReleaseInterruptedBudget = 600*time.Millisecond, 200*time.Millisecond
	for _, interrupted := range []bool{false, true} {
		t.Run(fmt.Sprintf("interrupted=%v", interrupted), func(t *testing.T) {
			mem := leaseStore(t)
			var down atomic.Bool
			s := outageStore{Store: mem, failing: func(string) bool { return down.Load() }}
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			lctx, cancel := context.WithCancel(ctx)
			defer cancel()
			l, err := TakeLease(lctx, s, "r", 3600, log)
			require.NoError(t, err)
			down.Store(true)
			want := leaseReleaseBudget
			if interrupted {
				cancel()
				want = leaseReleaseInterruptedBudget
			}
			start := time.Now()
			l.Release()
			took := time.Since(start)
			require.GreaterOrEqual(t, took, want)
			require.Less(t, took, want+time.Second)
			require.Equal(t, l.holder, readLease(t, mem, "r").Holder, "the lease could not be deleted")
			out := logs.String()
			require.Equal(t, 1, strings.Count(out, "level=WARN msg=\"could not release the lease yet; retrying\""), "one warning, then the error")
			require.Contains(t, out, "level=ERROR msg=\"could not release the lease r/_LEASE.json")
			require.Contains(t, out, "it stays until it expires at ")
			require.Contains(t, out, "(lease TTL 1h0m0s)")
			require.Contains(t, out, "delete r/_LEASE.json from the store by hand")
			require.Contains(t, out, "connection refused")
		})
	}
}

// TestLeaseReleaseInterrupted: after SIGINT/SIGTERM (the lease's parent
// context cancelled) a healthy store releases the lease at once.
func TestLeaseReleaseInterrupted(t *testing.T) {
	mem := leaseStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	l, err := TakeLease(ctx, mem, "r", 3600, quietLog())
	require.NoError(t, err)
	cancel()
	start := time.Now()
	l.Release()
	require.Less(t, time.Since(start), 500*time.Millisecond)
	_, err = mem.Stat(context.Background(), LeaseKey("r"))
	require.ErrorIs(t, err, storage.ErrNotFound)
}

// TestLeaseReleaseStopsAtExpiry: release never retries past the lease's
// expiry: from then on another invocation may take the lease over between
// a read and the delete, and a late delete would remove the new holder's
// lease. With a 1 s TTL and the store down, release gives up at the
// expiry, not after its whole budget; a lease already expired gets one
// attempt.
func TestLeaseReleaseStopsAtExpiry(t *testing.T) {
	ctx := context.Background()
	defer func(b time.Duration) { leaseReleaseBudget = b }(leaseReleaseBudget)
	leaseReleaseBudget = 8 * time.Second
	mem := leaseStore(t)
	var down atomic.Bool
	var attempts atomic.Int32
	s := outageStore{Store: mem, failing: func(op string) bool {
		if down.Load() && op == "get" {
			attempts.Add(1)
		}
		return down.Load()
	}}
	taken := time.Now()
	l, err := TakeLease(ctx, s, "r", 1, quietLog())
	require.NoError(t, err)
	down.Store(true)
	l.Release()
	require.Less(t, time.Since(taken), 2500*time.Millisecond, "release retried past the lease's expiry")
	require.Greater(t, attempts.Load(), int32(1), "retried until the expiry")

	mem2 := leaseStore(t)
	attempts.Store(0)
	s.Store = mem2
	down.Store(false)
	l, err = TakeLease(ctx, s, "r", 0.2, quietLog())
	require.NoError(t, err)
	down.Store(true)
	time.Sleep(time.Second) // renewal fails: the lease expires
	attempts.Store(0)
	start := time.Now()
	l.Release()
	require.Less(t, time.Since(start), leaseReleaseLastTry+500*time.Millisecond)
	// One attempt; a renewal tick racing the release's stop may add a read.
	require.LessOrEqual(t, attempts.Load(), int32(2), "one attempt at an expired lease")
}

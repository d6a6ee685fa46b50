package pipeline

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spade-pipeline/spade/pipeline/storage"
)

// Lease is the content of <run>/_LEASE.json: who runs the run now. The
// same shape is the content of a takeover claim (TakeoverClaimKey). Fields
// after PID are empty in lease files written by builds before they existed;
// such leases are still read, and judged by host name and pid alone.
type Lease struct {
	// Holder is a random id (16 hex digits) of the invocation holding the
	// lease; release deletes the lease only while it still names it.
	Holder string `json:"holder"`
	// Host is the holder's host name (os.Hostname; "" when unknown).
	Host string `json:"host"`
	// PID is the holder's process id on Host.
	PID int `json:"pid"`
	// MachineID is the holder host's /etc/machine-id ("" when unknown).
	MachineID string `json:"machine_id,omitempty"`
	// BootID is the holder host's kernel boot id at the time the lease was
	// written (/proc/sys/kernel/random/boot_id; "" when unknown). Another
	// boot id on the same machine means the holder's process ended in a
	// reboot.
	BootID string `json:"boot_id,omitempty"`
	// PIDNamespace names the holder's pid namespace, the target of
	// /proc/self/ns/pid such as "pid:[4026531836]" ("" when unknown). PID
	// means something only in that namespace.
	PIDNamespace string `json:"pid_ns,omitempty"`
	// Start is the holder process's start time in clock ticks after boot
	// (field 22 of /proc/PID/stat; 0 when unknown). A live process with
	// PID and another start time is another process that reuses the pid.
	Start uint64 `json:"start,omitempty"`
	// Expires is when another invocation may take the lease over, unless the
	// holder renews it first (it renews every TTL/3 while it runs).
	Expires time.Time `json:"expires"`
}

// LeaseKey is the key of the run's lease.
func LeaseKey(run string) string { return run + "/_LEASE.json" }

// TakeoverClaimKey is the key of the claim that generation gen of a
// takeover writes (put-if-absent) before it replaces the stale lease whose
// bytes are stale: "<run>/_LEASE.takeover-<sha256(stale)[:16]>-<gen>.json".
// Exactly one invocation wins a claim, and only the winner deletes the
// stale lease. Generation gen+1 is tried only when claim gen was abandoned
// (its writer's process is gone, or it expired).
func TakeoverClaimKey(run string, stale []byte, gen int) string {
	sum := sha256.Sum256(stale)
	return fmt.Sprintf("%s/_LEASE.takeover-%s-%d.json", run, hex.EncodeToString(sum[:8]), gen)
}

// maxTakeoverClaims bounds the claim generations one takeover walks: more
// abandoned claims than this mean something keeps killing takers.
const maxTakeoverClaims = 4

// AcquireLease takes the run's lease with put-if-absent, for `spade round
// next` under cron. ttl is in seconds: it must be finite and > 0, or
// AcquireLease fails before it touches the store.
//
// When the lease exists it is taken over if it is stale: malformed, past
// its expiry, or written by a process of this host that no longer runs
// (same host name, and same machine id, boot id and pid namespace where
// the lease records them; then the pid is gone or a zombie, or belongs to
// a process with another start time, or the machine has rebooted since:
// same machine id, another boot id). A lease of another host, or of a
// live process of this one, is not stale until it expires: ErrBusy
// (wrapped, naming the holder, its pid and host, and the expiry).
//
// A takeover is safe against other invocations taking over at the same
// time: the taker first wins a claim (TakeoverClaimKey, put-if-absent),
// then checks that the lease still holds the stale bytes, deletes it and
// puts its own with put-if-absent, then deletes the claim. A taker that
// loses the claim to a live one gets ErrBusy.
//
// The returned release stops renewal and deletes the lease if it still
// names this holder, retrying a failing store for a bounded time (see
// HeldLease.Release). Renewal (every TTL/3) rewrites the lease only while it
// still names this holder; once another invocation has taken it over,
// renewal stops and logs an error. AcquireLease is TakeLease without the
// fencing: use TakeLease for work that commits under the lease.
func AcquireLease(ctx context.Context, s storage.Store, run string, ttl float64, log *slog.Logger) (release func(), err error) {
	l, err := TakeLease(ctx, s, run, ttl, log)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// ErrLeaseLost is the cause with which a HeldLease's context is cancelled,
// and what HeldLease.Check wraps, once the run's lease no longer names its
// holder: another invocation took it over (the holder was stopped or
// stalled past the lease's expiry, or its TTL is shorter than its round)
// or it was removed. The holder must then stop writing: the round goes on
// under the new holder.
var ErrLeaseLost = errors.New("lease lost")

// HeldLease is the run's lease held by this invocation (TakeLease): a
// context that ends when the lease is lost, a fencing check for commits,
// and its release.
type HeldLease struct {
	store   storage.Store
	key     string
	holder  string
	ctx     context.Context
	cancel  context.CancelCauseFunc
	release func()
}

// Context is the parent context given to TakeLease, cancelled with cause
// ErrLeaseLost (context.Cause) as soon as renewal finds the lease taken
// over or removed, and cancelled by Release.
func (l *HeldLease) Context() context.Context { return l.ctx }

// Check reads the lease and returns an error wrapping ErrLeaseLost when it
// no longer names this holder (another invocation took it over, or it was
// removed), after cancelling Context with that cause; other errors are
// the store's. Call it right before each commit, so that a holder that was
// stopped past its expiry and resumed commits nothing beside the new
// holder's work. It narrows that window to the time between the check and
// the write; it cannot close it (the store has no compare-and-swap).
func (l *HeldLease) Check(ctx context.Context) error {
	data, err := storage.ReadAll(ctx, l.store, l.key)
	if isNotFound(err) {
		return l.lost("it was removed")
	}
	if err != nil {
		return fmt.Errorf("check lease %s: %w", l.key, err)
	}
	var held Lease
	if json.Unmarshal(data, &held) != nil {
		return l.lost("it is no longer valid JSON")
	}
	if held.Holder != l.holder {
		return l.lost(fmt.Sprintf("another invocation (%s, pid %d on %s) has taken it over", held.Holder, held.PID, held.Host))
	}
	return nil
}

// lost cancels the lease's context with ErrLeaseLost and returns that error.
func (l *HeldLease) lost(why string) error {
	err := fmt.Errorf("%w: %s of holder %s: %s; this invocation stopped, the run goes on under the lease's new holder (a --lease-ttl shorter than a round, or a holder stopped past its expiry)", ErrLeaseLost, l.key, l.holder, why)
	l.cancel(err)
	return err
}

// Release stops renewal and deletes the lease if it still names this
// holder; it also cancels Context. Calling it again does nothing more.
//
// A store that fails (it is still down after the outage that ended the
// round) is retried with backoff, reading the lease again before each
// delete, so a lease another invocation holds meanwhile is never deleted.
// Release tries for at most 30 s, or 10 s when the context given to
// TakeLease has already ended (SIGINT/SIGTERM), and never past the
// lease's expiry (after it, another invocation may take the lease over
// between a read and the delete; a lease already expired gets one
// attempt), and returns at once when the store answers. If it gives up, it logs an error (to the logger given
// to TakeLease) naming the key, the lease's expiry and TTL, and how to
// delete the lease by hand; the lease then stays until it expires, or
// until an invocation on this host finds this process gone.
func (l *HeldLease) Release() { l.release() }

// TakeLease takes the run's lease as AcquireLease does (the same rules for
// stale leases and takeovers, the same errors) and returns it held: its
// Context is cancelled with cause ErrLeaseLost once renewal finds that
// another invocation took the lease over (or removed it), and Check reads
// the lease to fence a commit.
func TakeLease(ctx context.Context, s storage.Store, run string, ttl float64, log *slog.Logger) (*HeldLease, error) {
	if !(ttl > 0) || ttl*float64(time.Second) >= math.MaxInt64 {
		return nil, fmt.Errorf("lease TTL must be > 0 seconds and finite (got %g)", ttl)
	}
	return holdLease(ctx, s, run, func(string) string { return LeaseKey(run) }, time.Duration(ttl*float64(time.Second)), log, "being run by")
}

// holdLease takes the lease at keyOf(holder) (holder: a fresh random id)
// with put-if-absent, taking over a stale one as TakeLease describes, and
// renews it every d/3 until released. busy says what a live holder does
// ("being run by", "being collected by") in the ErrBusy message.
func holdLease(ctx context.Context, s storage.Store, run string, keyOf func(holder string) string, d time.Duration, log *slog.Logger, busy string) (*HeldLease, error) {
	var id [8]byte
	_, _ = rand.Read(id[:])
	here := localProcess()
	me := here.lease(hex.EncodeToString(id[:]))
	key := keyOf(me.Holder)
	encode := func() []byte {
		me.Expires = time.Now().UTC().Add(d)
		b, _ := json.Marshal(me)
		return b
	}
	for attempt := 0; ; attempt++ {
		err := storage.PutBytesIfAbsent(ctx, s, key, encode())
		if err == nil {
			break
		}
		if !isExists(err) {
			return nil, fmt.Errorf("take lease %s: %w", key, err)
		}
		data, rerr := storage.ReadAll(ctx, s, key)
		if isNotFound(rerr) && attempt < 3 {
			continue
		}
		if rerr != nil {
			return nil, fmt.Errorf("read lease %s: %w", key, rerr)
		}
		var held Lease
		why := ""
		if jerr := json.Unmarshal(data, &held); jerr != nil {
			why = "it is not valid JSON"
		} else if !time.Now().Before(held.Expires) {
			why = "it expired at " + held.Expires.Format(time.RFC3339)
		} else {
			why = here.staleHolder(held, probeProcess)
		}
		if why == "" {
			return nil, fmt.Errorf("%w: run %s is %s %s (pid %d on %s), whose lease %s expires at %s unless renewed", ErrBusy, run, busy, held.Holder, held.PID, held.Host, key, held.Expires.Format(time.RFC3339))
		}
		if attempt >= 3 {
			return nil, fmt.Errorf("%w: could not take over the stale lease %s (%s): it keeps changing", ErrBusy, key, why)
		}
		log.Warn("taking over a stale lease", "key", key, "holder", held.Holder, "host", held.Host, "pid", held.PID, "why", why)
		taken, err := takeOver(ctx, s, run, key, data, encode, here, me.Holder, d)
		if err != nil {
			return nil, err
		}
		if taken {
			break
		}
	}
	// written is the lease as last written successfully, for the expiry
	// that a failed release reports. The renewal goroutine updates it;
	// release reads it after the goroutine has ended.
	written := me
	lctx, cancel := context.WithCancelCause(ctx)
	l := &HeldLease{store: s, key: key, holder: me.Holder, ctx: lctx, cancel: cancel}
	renewCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d / 3)
		defer t.Stop()
		for {
			select {
			case <-renewCtx.Done():
				return
			case <-t.C:
				data, err := storage.ReadAll(renewCtx, s, key)
				if err == nil {
					var held Lease
					if json.Unmarshal(data, &held) != nil || held.Holder != me.Holder {
						log.Error("lease lost: another invocation has taken it over; no longer renewing, stopping", "key", key, "holder", me.Holder, "now", held.Holder)
						_ = l.lost(fmt.Sprintf("another invocation (%s, pid %d on %s) has taken it over", held.Holder, held.PID, held.Host))
						return
					}
					if err = storage.PutBytes(renewCtx, s, key, encode()); err == nil {
						written = me
					}
				} else if isNotFound(err) {
					log.Error("lease lost: it was removed; no longer renewing, stopping", "key", key, "holder", me.Holder)
					_ = l.lost("it was removed")
					return
				}
				if err != nil && renewCtx.Err() == nil {
					log.Warn("could not renew lease", "key", key, "err", err)
				}
			}
		}
	}()
	var once sync.Once
	l.release = func() {
		once.Do(func() {
			stop()
			<-done
			defer cancel(context.Canceled)
			releaseHeld(ctx, s, key, me.Holder, written, d, log)
		})
	}
	return l, nil
}

// releaseHeld is HeldLease.Release's work once renewal has stopped: it
// deletes the lease at key if holder still holds it, retrying within
// leaseReleaseBudget (leaseReleaseInterruptedBudget once ctx has ended)
// but never past written.Expires, and logs at ERROR what a failure leaves
// behind (d is the lease TTL, for that message). Split out of holdLease to
// keep it short.
func releaseHeld(ctx context.Context, s storage.Store, key, holder string, written Lease, d time.Duration, log *slog.Logger) {
	budget := leaseReleaseBudget
	if ctx.Err() != nil {
		budget = leaseReleaseInterruptedBudget
	}
	// Never retry past the lease's expiry: from then on another
	// invocation may take it over between a read and the delete,
	// and the delete would remove the new holder's lease. Past it
	// already, one attempt is made (read, then delete if ours).
	start := time.Now()
	var err error
	if !start.Before(written.Expires) {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), leaseReleaseLastTry)
		err = releaseOnce(rctx, s, key, holder)
		rcancel()
	} else {
		deadline := start.Add(budget)
		if written.Expires.Before(deadline) {
			deadline = written.Expires
		}
		budget = time.Until(deadline).Round(time.Millisecond)
		rctx, rcancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		warned := false
		err = releaseLease(rctx, s, key, holder, func(err error) {
			if !warned {
				warned = true
				log.Warn("could not release the lease yet; retrying", "key", key, "for_at_most", budget.String(), "err", err)
			}
		})
		rcancel()
	}
	if err == nil {
		return
	}
	tried := time.Since(start).Round(time.Millisecond)
	left := time.Until(written.Expires).Round(time.Second)
	if left <= 0 {
		log.Error(fmt.Sprintf("could not release the lease %s (tried for %s); it expired at %s, so the next `spade round next` of this run takes it over", key, tried, written.Expires.Format(time.RFC3339)),
			"key", key, "store", s.URL(), "expires", written.Expires, "err", err)
		return
	}
	log.Error(fmt.Sprintf("could not release the lease %s (tried for %s); it stays until it expires at %s, in %s (lease TTL %s): "+
		"until then a `spade round next` of this run on another host exits 4 (busy), while one on this host may take it over as soon as this process has ended. "+
		"To free it sooner, make sure no `spade round next` of this run is running, then delete %s from the store by hand (rm on a file store, aws s3 rm on S3)",
		key, tried, written.Expires.Format(time.RFC3339), left, d, key),
		"key", key, "store", s.URL(), "expires", written.Expires, "err", err)
}

// leaseReleaseBudget bounds how long HeldLease.Release keeps trying when
// the store fails; leaseReleaseInterruptedBudget replaces it when the
// lease's parent context has already ended (SIGINT/SIGTERM), so that a
// process being stopped does not outlast a short grace period. Variables,
// so that tests can shorten them.
// The release never retries past the lease's own expiry;
// leaseReleaseLastTry bounds the single attempt made when the lease has
// expired already.
var (
	leaseReleaseBudget            = 30 * time.Second
	leaseReleaseInterruptedBudget = 10 * time.Second
	leaseReleaseLastTry           = 2 * time.Second
)

// releaseLease deletes the lease at key while it names holder, retrying
// with backoff (100 ms doubling to 5 s) until ctx ends: the store
// cannot tell an outage from a lasting failure, so any error but a
// missing lease counts as transient. Each attempt reads the lease again
// first, so a lease another invocation holds meanwhile is left alone.
// nil means the lease is gone or names another holder (or is not valid
// JSON, so not this holder's); otherwise the last error, with ctx's when
// it ended first. retrying is called with each error that is retried.
func releaseLease(ctx context.Context, s storage.Store, key, holder string, retrying func(error)) error {
	wait := 100 * time.Millisecond
	for {
		err := releaseOnce(ctx, s, key, holder)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		retrying(err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (gave up: %w)", err, context.Cause(ctx))
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// releaseOnce is one attempt of releaseLease.
func releaseOnce(ctx context.Context, s storage.Store, key, holder string) error {
	data, err := storage.ReadAll(ctx, s, key)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read lease: %w", err)
	}
	var held Lease
	if json.Unmarshal(data, &held) != nil || held.Holder != holder {
		return nil
	}
	if err := s.Delete(ctx, key); err != nil && !isNotFound(err) {
		return fmt.Errorf("delete lease: %w", err)
	}
	return nil
}

// takeOver replaces the stale lease bytes stale of run by a new lease
// (encode's bytes) of holder: it wins a takeover claim, checks that the lease still
// holds stale, deletes it, and puts the new lease with put-if-absent. It
// reports whether the new lease was put; false with a nil error means the
// lease changed meanwhile and the caller should look at it again. ErrBusy
// when a live claim of another invocation exists.
func takeOver(ctx context.Context, s storage.Store, run, key string, stale []byte, encode func() []byte, here process, holder string, ttl time.Duration) (bool, error) {
	claim := here.lease(holder)
	var abandoned []string
	claimKey := ""
	for gen, tries := 0, 0; claimKey == ""; tries++ {
		if gen == maxTakeoverClaims || tries == 2*maxTakeoverClaims {
			return false, fmt.Errorf("%w: lease %s is stale, but no takeover claim could be won (%d abandoned, from %s on); delete them to let a takeover proceed", ErrBusy, key, gen, TakeoverClaimKey(run, stale, 0))
		}
		k := TakeoverClaimKey(run, stale, gen)
		claim.Expires = time.Now().UTC().Add(ttl)
		b, _ := json.Marshal(claim)
		err := storage.PutBytesIfAbsent(ctx, s, k, b)
		if err == nil {
			claimKey = k
			break
		}
		if !isExists(err) {
			return false, fmt.Errorf("claim takeover of lease %s: %w", key, err)
		}
		data, err := storage.ReadAll(ctx, s, k)
		if isNotFound(err) {
			continue // the claim was removed meanwhile: try the same generation again
		}
		if err != nil {
			return false, fmt.Errorf("read takeover claim %s: %w", k, err)
		}
		var other Lease
		if json.Unmarshal(data, &other) == nil && time.Now().Before(other.Expires) && here.staleHolder(other, probeProcess) == "" {
			return false, fmt.Errorf("%w: lease %s is stale and another invocation (pid %d on %s) is taking it over (%s)", ErrBusy, key, other.PID, other.Host, k)
		}
		abandoned = append(abandoned, k)
		gen++
	}
	defer func() {
		bg := context.WithoutCancel(ctx)
		for _, k := range append(abandoned, claimKey) {
			_ = s.Delete(bg, k)
		}
	}()
	cur, err := storage.ReadAll(ctx, s, key)
	switch {
	case isNotFound(err):
	case err != nil:
		return false, fmt.Errorf("read lease %s: %w", key, err)
	case !bytes.Equal(cur, stale):
		return false, nil
	default:
		if err := s.Delete(ctx, key); err != nil && !isNotFound(err) {
			return false, fmt.Errorf("remove stale lease %s: %w", key, err)
		}
	}
	err = storage.PutBytesIfAbsent(ctx, s, key, encode())
	if isExists(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("take lease %s: %w", key, err)
	}
	return true, nil
}

// process identifies a process across hosts, boots and pid namespaces.
type process struct {
	host, machineID, bootID, pidNS string
	pid                            int
	start                          uint64
}

// localProcess returns this process's identity; the fields the host does
// not expose (no /proc, no /etc/machine-id) are left empty.
func localProcess() process {
	host, _ := os.Hostname()
	p := process{host: host, pid: os.Getpid(), machineID: readLine("/etc/machine-id"), bootID: readLine("/proc/sys/kernel/random/boot_id")}
	p.pidNS, _ = os.Readlink("/proc/self/ns/pid")
	if st, ok := procStat(p.pid); ok {
		p.start = st.start
	}
	return p
}

// lease returns a lease of p held by holder, without an expiry.
func (p process) lease(holder string) Lease {
	return Lease{Holder: holder, Host: p.host, PID: p.pid, MachineID: p.machineID, BootID: p.bootID, PIDNamespace: p.pidNS, Start: p.start}
}

// staleHolder says why held, a lease (or takeover claim) that has not
// expired, names a process that can no longer run, or returns "" when that
// cannot be known here: held must name this host (host name, and machine
// id when both sides record one). Then another boot id with the same
// recorded machine id means a reboot; another pid namespace, or another
// boot id without a machine id to prove it is this machine, means the pid
// cannot be checked. In the same boot and namespace, the holder is gone
// when probe finds no process (or a zombie) with its pid, or one with
// another start time than the lease records.
func (p process) staleHolder(held Lease, probe func(pid int) (exists bool, start uint64)) string {
	if held.Host == "" || held.Host != p.host {
		return ""
	}
	if held.MachineID != "" && p.machineID != "" && held.MachineID != p.machineID {
		return ""
	}
	if held.BootID != "" && p.bootID != "" && held.BootID != p.bootID {
		if held.MachineID != "" && held.MachineID == p.machineID {
			return fmt.Sprintf("host %s has rebooted since it was written (boot id %.8s, now %.8s)", held.Host, held.BootID, p.bootID)
		}
		return ""
	}
	if held.PIDNamespace != "" && p.pidNS != "" && held.PIDNamespace != p.pidNS {
		return ""
	}
	if held.PID <= 0 {
		return ""
	}
	exists, start := probe(held.PID)
	if !exists {
		return fmt.Sprintf("its process %d no longer runs on %s", held.PID, held.Host)
	}
	if held.Start != 0 && start != 0 && start != held.Start {
		return fmt.Sprintf("pid %d on %s now belongs to another process (started at tick %d; the holder started at tick %d)", held.PID, held.Host, start, held.Start)
	}
	return ""
}

// probeProcess reports whether a process with pid exists in this pid
// namespace and is not a zombie, and its start time in clock ticks after
// boot (0 when /proc cannot tell).
func probeProcess(pid int) (exists bool, start uint64) {
	if pid <= 0 {
		return false, 0
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false, 0
	}
	st, ok := procStat(pid)
	if !ok {
		return true, 0
	}
	return st.state != 'Z' && st.state != 'X', st.start
}

type procStatus struct {
	state byte
	start uint64
}

// procStat reads the state (field 3) and start time (field 22, clock ticks
// after boot) of /proc/PID/stat; ok is false when the file cannot be read
// or parsed.
func procStat(pid int) (procStatus, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStatus{}, false
	}
	// The command name (field 2) is in parentheses and may hold spaces and
	// parentheses itself: the fields after it start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStatus{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 || len(f[0]) != 1 {
		return procStatus{}, false
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return procStatus{}, false
	}
	return procStatus{state: f[0][0], start: start}, true
}

// readLine returns the first line of a small file, trimmed ("" on error).
func readLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line)
}

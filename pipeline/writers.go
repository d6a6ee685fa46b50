package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spade-pipeline/spade/pipeline/storage"
)

// The writer/collector protocol (docs/format.md "Writers and gc"): every
// invocation that writes into a run registers itself as a writer of the
// run for as long as it writes, and `spade gc` holds the run's gc lease for
// as long as it decides and deletes. Each side writes its own object first
// and looks for the other's second, so of a writer and a gc that start at
// the same time at least one sees the other (the store is read-after-write
// consistent, S3 included): gc then refuses the run (ErrBusy), and a writer
// waits until the gc lease is gone. gc therefore never deletes while a
// writer of that run is live, and a writer never writes a part file that a
// gc of its run, past its decision, could still delete.

// WriterLeaseTTL is how long a writer registration stays live without
// being renewed (it is renewed every third of it). A writer killed on
// another host keeps gc off its run for at most this long; one killed on
// this host not at all (its process is gone). A variable so that tests
// can shorten it.
var WriterLeaseTTL = 10 * time.Minute

// GCLeaseTTL is the same for the gc lease: a gc killed on another host
// keeps writers of the run waiting for at most this long.
var GCLeaseTTL = 2 * time.Minute

// WriterLeasePrefix is the key prefix of the run's writer registrations.
func WriterLeasePrefix(run string) string { return run + "/_LEASE.writer-" }

// WriterLeaseKey is the key of the writer registration of holder, a
// random id (16 hex digits): "<run>/_LEASE.writer-<holder>.json". Its
// content is a Lease.
func WriterLeaseKey(run, holder string) string { return WriterLeasePrefix(run) + holder + ".json" }

// GCLeaseKey is the key of the run's gc lease, "<run>/_LEASE.gc.json",
// held by one `spade gc` at a time while it collects the run. Its content
// is a Lease.
func GCLeaseKey(run string) string { return run + "/_LEASE.gc.json" }

// RegisterWriter registers this invocation as a writer of run: it puts a
// writer registration (WriterLeaseKey, renewed every WriterLeaseTTL/3)
// and then waits until the run has no live gc lease (GCLeaseKey),
// removing a stale one (its gc's process is gone from this host, or it
// expired). It logs once when it has to wait. Release the returned lease
// when the invocation stops writing; call its Check before each commit
// write, so that a writer whose registration a gc removed as stale (it was
// stopped past WriterLeaseTTL) commits nothing. Errors: the store's, or
// ctx's while waiting.
func RegisterWriter(ctx context.Context, s storage.Store, run string, log *slog.Logger) (*HeldLease, error) {
	if log == nil {
		log = slog.Default()
	}
	l, err := holdLease(ctx, s, run, func(holder string) string { return WriterLeaseKey(run, holder) }, WriterLeaseTTL, log, "registered as a writer by")
	if err != nil {
		return nil, fmt.Errorf("register as a writer of run %s: %w", run, err)
	}
	if err := waitForGC(ctx, s, run, log); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// waitForGC returns once run has no live gc lease, removing a stale one.
func waitForGC(ctx context.Context, s storage.Store, run string, log *slog.Logger) error {
	key := GCLeaseKey(run)
	here := localProcess()
	wait := 20 * time.Millisecond
	logged := false
	for {
		data, err := storage.ReadAll(ctx, s, key)
		if isNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read gc lease %s: %w", key, err)
		}
		held, why := judgeLease(here, data)
		if why != "" {
			log.Warn("removing a stale gc lease", "key", key, "holder", held.Holder, "host", held.Host, "pid", held.PID, "why", why)
			if err := deleteIfUnchanged(ctx, s, key, data); err != nil {
				return err
			}
			continue
		}
		if !logged {
			logged = true
			log.Info("waiting for spade gc to finish with the run", "run", run, "gc_pid", held.PID, "gc_host", held.Host, "lease", key, "expires", held.Expires)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for spade gc (pid %d on %s, %s) to finish with run %s: %w", held.PID, held.Host, key, run, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, time.Second)
	}
}

// judgeLease decodes a lease (or registration) and says why it is stale
// ("" while it is live): not valid JSON, expired, or naming a process of
// this host that no longer runs (process.staleHolder).
func judgeLease(here process, data []byte) (Lease, string) {
	var held Lease
	if err := json.Unmarshal(data, &held); err != nil {
		return held, "it is not valid JSON"
	}
	if !time.Now().Before(held.Expires) {
		return held, "it expired at " + held.Expires.Format(time.RFC3339)
	}
	return held, here.staleHolder(held, probeProcess)
}

// deleteIfUnchanged deletes key when it still holds data (read again
// first; the store has no compare-and-delete, so a write in between the
// read and the delete is lost, which the lease's own holder then finds in
// its Check).
func deleteIfUnchanged(ctx context.Context, s storage.Store, key string, data []byte) error {
	cur, err := storage.ReadAll(ctx, s, key)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", key, err)
	}
	if !bytes.Equal(cur, data) {
		return nil
	}
	if err := s.Delete(ctx, key); err != nil && !isNotFound(err) {
		return fmt.Errorf("remove stale %s: %w", key, err)
	}
	return nil
}

// TakeGCLease takes run's gc lease (GCLeaseKey) for `spade gc`, with the
// takeover rules of TakeLease (a stale gc lease is taken over; a live one
// gives ErrBusy naming its holder), renewed every GCLeaseTTL/3, and then
// checks that the run has no live writer (CheckNoWriters); when it has
// one, the lease is released and the error wraps ErrBusy. Hold it from
// before the run's listing that gc decides on until the last delete, and
// call CheckGC right before deleting.
func TakeGCLease(ctx context.Context, s storage.Store, run string, log *slog.Logger) (*HeldLease, error) {
	if log == nil {
		log = slog.Default()
	}
	l, err := holdLease(ctx, s, run, func(string) string { return GCLeaseKey(run) }, GCLeaseTTL, log, "being collected by spade gc")
	if err != nil {
		return nil, err
	}
	if err := CheckNoWriters(ctx, s, run, log); err != nil {
		l.Release()
		return nil, err
	}
	return l, nil
}

// CheckGC is what gc calls right before it deletes anything of run under
// lease l: the lease still names this gc (HeldLease.Check, ErrLeaseLost
// otherwise) and the run has no live writer (CheckNoWriters, ErrBusy).
func CheckGC(ctx context.Context, s storage.Store, run string, l *HeldLease, log *slog.Logger) error {
	if err := l.Check(ctx); err != nil {
		return err
	}
	return CheckNoWriters(ctx, s, run, log)
}

// CheckNoWriters lists run's writer registrations and returns an error
// wrapping ErrBusy, naming the first live one (its process and host), if
// any is live. A stale one (its process is gone from this host, or it
// expired, or it is not valid JSON) is removed and logged as a warning.
// Errors: the store's.
func CheckNoWriters(ctx context.Context, s storage.Store, run string, log *slog.Logger) error {
	infos, err := s.List(ctx, WriterLeasePrefix(run))
	if err != nil {
		return fmt.Errorf("list writers of run %s: %w", run, err)
	}
	here := localProcess()
	for _, in := range infos {
		if !strings.HasSuffix(in.Key, ".json") {
			continue
		}
		data, err := storage.ReadAll(ctx, s, in.Key)
		if isNotFound(err) {
			continue // released since the listing
		}
		if err != nil {
			return fmt.Errorf("read writer registration %s: %w", in.Key, err)
		}
		held, why := judgeLease(here, data)
		if why == "" {
			return fmt.Errorf("%w: run %s is being written by pid %d on %s (%s, expires %s unless renewed); gc leaves it alone until that invocation ends",
				ErrBusy, run, held.PID, held.Host, in.Key, held.Expires.Format(time.RFC3339))
		}
		log.Warn("removing a stale writer registration", "key", in.Key, "host", held.Host, "pid", held.PID, "why", why)
		if err := deleteIfUnchanged(ctx, s, in.Key, data); err != nil {
			return err
		}
	}
	return nil
}

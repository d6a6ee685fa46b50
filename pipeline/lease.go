package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spade-pipeline/spade/pipeline/storage"
)

// Lease is the content of <run>/_LEASE.json: who runs the run now.
type Lease struct {
	// Holder is a random id (16 hex digits) of the invocation holding the
	// lease; release deletes the lease only while it still names it.
	Holder string `json:"holder"`
	// Host is the holder's host name ("" when unknown).
	Host string `json:"host"`
	// PID is the holder's process id on Host.
	PID int `json:"pid"`
	// Expires is when another invocation may take the lease over, unless the
	// holder renews it first (it renews every TTL/3 while it runs).
	Expires time.Time `json:"expires"`
}

// LeaseKey is the key of the run's lease.
func LeaseKey(run string) string { return run + "/_LEASE.json" }

// AcquireLease takes the run's lease with put-if-absent, for `spade round
// next` under cron: ErrBusy (wrapped, naming the holder) when a live lease
// exists; a lease past its expiry is taken over. The returned release
// stops renewal and deletes the lease. ttl is in seconds.
func AcquireLease(ctx context.Context, s storage.Store, run string, ttl float64, log *slog.Logger) (release func(), err error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("lease TTL must be > 0 seconds (got %g)", ttl)
	}
	d := time.Duration(ttl * float64(time.Second))
	var id [8]byte
	_, _ = rand.Read(id[:])
	host, _ := os.Hostname()
	me := Lease{Holder: hex.EncodeToString(id[:]), Host: host, PID: os.Getpid()}
	key := LeaseKey(run)
	put := func(ifAbsent bool) error {
		me.Expires = time.Now().UTC().Add(d)
		b, _ := json.Marshal(me)
		if ifAbsent {
			return storage.PutBytesIfAbsent(ctx, s, key, b)
		}
		return storage.PutBytes(ctx, s, key, b)
	}
	for attempt := 0; ; attempt++ {
		err := put(true)
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
		if jerr := json.Unmarshal(data, &held); jerr == nil && time.Now().Before(held.Expires) {
			return nil, fmt.Errorf("%w: run %s is being run by %s (pid %d on %s) until at least %s", ErrBusy, run, held.Holder, held.PID, held.Host, held.Expires.Format(time.RFC3339))
		}
		if attempt >= 3 {
			return nil, fmt.Errorf("%w: could not take over the expired lease %s", ErrBusy, key)
		}
		log.Warn("taking over an expired lease", "key", key, "holder", held.Holder, "expired", held.Expires)
		// Delete then put-if-absent: of several invocations taking over at
		// once, exactly one wins the put.
		if derr := s.Delete(ctx, key); derr != nil && !isNotFound(derr) {
			return nil, fmt.Errorf("remove expired lease %s: %w", key, derr)
		}
	}
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
				if err := put(false); err != nil {
					log.Warn("could not renew lease", "key", key, "err", err)
				}
			}
		}
	}()
	return func() {
		stop()
		<-done
		data, err := storage.ReadAll(context.WithoutCancel(ctx), s, key)
		if err != nil {
			return
		}
		var held Lease
		if json.Unmarshal(data, &held) == nil && held.Holder == me.Holder {
			_ = s.Delete(context.WithoutCancel(ctx), key)
		}
	}, nil
}

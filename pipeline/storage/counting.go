package storage

import (
	"context"
	"io"
	"sync/atomic"
)

// Counts is a snapshot of a CountingStore's counters. Requests are calls
// made through the wrapper (one per method call, whatever the backend does
// underneath); bytes are payload bytes, not wire bytes.
type Counts struct {
	// Gets, GetRanges, Puts, PutIfAbsents, Stats, Lists and Deletes count
	// the calls of Get, GetRange, Put, PutIfAbsent, Stat, List and Delete,
	// in that order.
	Gets, GetRanges, Puts, PutIfAbsents, Stats, Lists, Deletes int64
	// BytesRead is the number of bytes callers read from Get and GetRange
	// bodies.
	BytesRead int64
	// BytesWritten is the number of bytes Put and PutIfAbsent consumed from
	// their readers, whether or not the write then succeeded.
	BytesWritten int64
}

// Requests returns the total number of calls of every kind.
func (c Counts) Requests() int64 {
	return c.Gets + c.GetRanges + c.Puts + c.PutIfAbsents + c.Stats + c.Lists + c.Deletes
}

// CountingStore wraps a Store and counts requests and bytes, for benchmarks
// and for tests that check a reader fetched only what it needed (e.g.
// that sampling one row group does not read the whole part file). It is
// safe for concurrent use; counting costs one atomic add per call or Read.
type CountingStore struct {
	Store
	gets, ranges, puts, putIfAbsents, stats, lists, deletes atomic.Int64
	bytesRead, bytesWritten                                 atomic.Int64
}

// Counting returns s wrapped in a CountingStore with all counters at zero.
func Counting(s Store) *CountingStore { return &CountingStore{Store: s} }

// Counts returns the current counters.
func (c *CountingStore) Counts() Counts {
	return Counts{
		Gets: c.gets.Load(), GetRanges: c.ranges.Load(), Puts: c.puts.Load(),
		PutIfAbsents: c.putIfAbsents.Load(), Stats: c.stats.Load(),
		Lists: c.lists.Load(), Deletes: c.deletes.Load(),
		BytesRead: c.bytesRead.Load(), BytesWritten: c.bytesWritten.Load(),
	}
}

// Reset sets every counter back to zero.
func (c *CountingStore) Reset() {
	for _, v := range []*atomic.Int64{&c.gets, &c.ranges, &c.puts, &c.putIfAbsents, &c.stats, &c.lists, &c.deletes, &c.bytesRead, &c.bytesWritten} {
		v.Store(0)
	}
}

// Get implements Store.Get: it counts one request (also when it fails)
// and the body bytes the caller reads. Errors are the wrapped store's,
// returned unchanged.
func (c *CountingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	c.gets.Add(1)
	rc, err := c.Store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return &countingReadCloser{rc: rc, n: &c.bytesRead}, nil
}

// GetRange implements Store.GetRange: it counts one request (also when it
// fails) and the body bytes the caller reads. Errors are the wrapped
// store's, returned unchanged.
func (c *CountingStore) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	c.ranges.Add(1)
	rc, err := c.Store.GetRange(ctx, key, offset, length)
	if err != nil {
		return nil, err
	}
	return &countingReadCloser{rc: rc, n: &c.bytesRead}, nil
}

// Put implements Store.Put: it counts one request and the bytes the
// backend consumes from r, also when the write then fails. Errors are the
// wrapped store's, returned unchanged.
func (c *CountingStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	c.puts.Add(1)
	return c.Store.Put(ctx, key, &countingReader{r: r, n: &c.bytesWritten}, size)
}

// PutIfAbsent implements Store.PutIfAbsent: it counts one request and the
// bytes the backend consumes from r, also when the write then fails (with
// ErrExists or otherwise). Errors are the wrapped store's, returned
// unchanged.
func (c *CountingStore) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	c.putIfAbsents.Add(1)
	return c.Store.PutIfAbsent(ctx, key, &countingReader{r: r, n: &c.bytesWritten}, size)
}

// Stat implements Store.Stat and counts one request (also when it fails).
// Errors are the wrapped store's, returned unchanged.
func (c *CountingStore) Stat(ctx context.Context, key string) (Info, error) {
	c.stats.Add(1)
	return c.Store.Stat(ctx, key)
}

// List implements Store.List and counts one request (however many pages
// the backend fetches, and also when it fails). Errors are the wrapped
// store's, returned unchanged.
func (c *CountingStore) List(ctx context.Context, prefix string) ([]Info, error) {
	c.lists.Add(1)
	return c.Store.List(ctx, prefix)
}

// Delete implements Store.Delete and counts one request (also when it
// fails). Errors are the wrapped store's, returned unchanged.
func (c *CountingStore) Delete(ctx context.Context, key string) error {
	c.deletes.Add(1)
	return c.Store.Delete(ctx, key)
}

type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

type countingReadCloser struct {
	rc io.ReadCloser
	n  *atomic.Int64
}

func (c *countingReadCloser) Read(p []byte) (int, error) {
	n, err := c.rc.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingReadCloser) Close() error { return c.rc.Close() }

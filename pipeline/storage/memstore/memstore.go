// Package memstore is the mem:// storage backend: objects in process
// memory, for tests. Stores opened with the same name share one namespace
// for the life of the process, so a test can open "mem://t1" twice (say,
// once as the writer and once as a reader) and see the same objects. The
// clock that stamps ModTime can be set, so gc grace-period tests need not
// sleep.
//
// URL: mem://NAME[/PREFIX]. NAME is the URL host and must not be empty;
// an optional PREFIX path puts the store's keys under PREFIX/ in that
// namespace (like an S3 prefix).
package memstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/internal/streams"
)

func init() {
	storage.Register("mem", func(_ context.Context, u *url.URL) (storage.Store, error) {
		return OpenURL(u)
	})
}

type object struct {
	data    []byte // never mutated after it is stored
	modTime time.Time
}

// namespace is what stores of one name share.
type namespace struct {
	mu      sync.RWMutex
	objects map[string]object
	now     func() time.Time
}

var (
	namespacesMu sync.Mutex
	namespaces   = map[string]*namespace{}
)

func lookup(name string) *namespace {
	namespacesMu.Lock()
	defer namespacesMu.Unlock()
	ns, ok := namespaces[name]
	if !ok {
		ns = &namespace{objects: map[string]object{}, now: time.Now}
		namespaces[name] = ns
	}
	return ns
}

// Forget drops the namespace called name and its objects; stores already
// open on it keep working on the dropped copy, and the next Open starts
// empty. For tests that reuse a name.
func Forget(name string) {
	namespacesMu.Lock()
	defer namespacesMu.Unlock()
	delete(namespaces, name)
}

// Store is a mem:// store. Methods are safe for concurrent use.
type Store struct {
	ns     *namespace
	name   string
	prefix string // "" or ends in "/"
	url    string
}

var _ storage.Store = (*Store)(nil)

// New opens (creating if needed) the namespace called name with no prefix.
func New(name string) *Store {
	return &Store{ns: lookup(name), name: name, url: "mem://" + name}
}

// OpenURL opens a mem:// URL. Errors name the URL: a wrong scheme, an
// empty name, or user info, query or fragment (none mean anything here).
func OpenURL(u *url.URL) (*Store, error) {
	raw := storage.Redact(u.String())
	if u.Scheme != "mem" {
		return nil, storage.BadURL(fmt.Errorf("open mem store %q: scheme is not mem", raw))
	}
	if u.Host == "" {
		return nil, storage.BadURL(fmt.Errorf("open mem store %q: missing store name (want mem://NAME[/PREFIX])", raw))
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, storage.BadURL(fmt.Errorf("open mem store %q: user info, query and fragment are not supported", raw))
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		if err := storage.ValidateKey(prefix); err != nil {
			return nil, storage.BadURL(fmt.Errorf("open mem store %q: prefix: %w", raw, err))
		}
		prefix += "/"
	}
	return &Store{ns: lookup(u.Host), name: u.Host, prefix: prefix, url: raw}, nil
}

// SetClock replaces the clock that stamps ModTime on every later Put, for
// all stores sharing this store's name. now must be safe to call from any
// goroutine. Times are stored in UTC.
func (s *Store) SetClock(now func() time.Time) {
	s.ns.mu.Lock()
	defer s.ns.mu.Unlock()
	s.ns.now = now
}

func (s *Store) check(ctx context.Context, op, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s in %s: %w", op, key, s.url, err)
	}
	if err := storage.ValidateKey(key); err != nil {
		return fmt.Errorf("%s in %s: %w", op, s.url, err)
	}
	return nil
}

func (s *Store) lookupObject(op, key string) (object, error) {
	s.ns.mu.RLock()
	o, ok := s.ns.objects[s.prefix+key]
	s.ns.mu.RUnlock()
	if !ok {
		return object{}, fmt.Errorf("%s %s in %s: %w", op, key, s.url, storage.ErrNotFound)
	}
	return o, nil
}

// Get implements storage.Store.Get. Errors, each naming the operation,
// key and store URL: ctx.Err() (also from Read once ctx is done);
// storage.ErrInvalidKey; storage.ErrNotFound when no object has the key.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := s.check(ctx, "get", key); err != nil {
		return nil, err
	}
	o, err := s.lookupObject("get", key)
	if err != nil {
		return nil, err
	}
	return streams.ReadCloserWithContext(ctx, io.NopCloser(bytes.NewReader(o.data))), nil
}

// GetRange implements storage.Store.GetRange: length bytes from offset,
// cut at the end of the object (offset and length in bytes). Errors are
// those of Get, plus a plain error for a negative offset or length
// (checked after the key, before the lookup).
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := s.check(ctx, "get range", key); err != nil {
		return nil, err
	}
	if offset < 0 || length < 0 {
		return nil, fmt.Errorf("get range %s in %s: negative offset %d or length %d", key, s.url, offset, length)
	}
	o, err := s.lookupObject("get range", key)
	if err != nil {
		return nil, err
	}
	size := int64(len(o.data))
	start, end := min(offset, size), min(offset+length, size)
	if offset+length < offset { // overflow
		end = size
	}
	return streams.ReadCloserWithContext(ctx, io.NopCloser(bytes.NewReader(o.data[start:end]))), nil
}

// maxPrealloc is the largest declared size (bytes) read allocates up front.
const maxPrealloc = 64 << 20

// read drains r fully before touching the map, so a cancelled or failed
// read leaves no object behind and other readers never see a prefix.
func (s *Store) read(ctx context.Context, op, key string, r io.Reader, size int64) ([]byte, error) {
	var buf bytes.Buffer
	if size > 0 && size <= maxPrealloc {
		// ReadFrom wants MinRead spare bytes before it will see EOF; without
		// them a full buffer doubles just to read nothing. A larger declared
		// size is not trusted with an allocation: the buffer grows as bytes
		// arrive, and a short body is ErrSizeMismatch.
		buf.Grow(int(size) + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(streams.Sized(streams.WithContext(ctx, r), size)); err != nil {
		return nil, fmt.Errorf("%s %s in %s: read body: %w", op, key, s.url, err)
	}
	return buf.Bytes(), nil
}

// Put implements storage.Store.Put: it reads all of r into memory first,
// then stores the object under the namespace lock, so readers never see a
// prefix. Errors, each naming the key and store URL: ctx.Err() (before,
// during and after the read); storage.ErrInvalidKey;
// streams.ErrSizeMismatch when r yields other than size bytes (size >= 0);
// r's read error. On error nothing is stored.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := s.check(ctx, "put", key); err != nil {
		return err
	}
	data, err := s.read(ctx, "put", key, r, size)
	if err != nil {
		return err
	}
	s.ns.mu.Lock()
	defer s.ns.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put %s in %s: %w", key, s.url, err)
	}
	s.ns.objects[s.prefix+key] = object{data: data, modTime: s.ns.now().UTC()}
	return nil
}

// PutIfAbsent implements storage.Store.PutIfAbsent; the check and the
// store happen under one lock, so exactly one of any number of concurrent
// callers wins. r is read in full (size bytes, or -1 for unknown) before
// the check, so a caller that finds the key taken still consumes its
// reader. Errors are those of Put, plus
// storage.ErrExists (wrapped) when the key exists.
func (s *Store) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := s.check(ctx, "put if absent", key); err != nil {
		return err
	}
	data, err := s.read(ctx, "put if absent", key, r, size)
	if err != nil {
		return err
	}
	s.ns.mu.Lock()
	defer s.ns.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("put if absent %s in %s: %w", key, s.url, err)
	}
	if _, ok := s.ns.objects[s.prefix+key]; ok {
		return fmt.Errorf("put if absent %s in %s: %w", key, s.url, storage.ErrExists)
	}
	s.ns.objects[s.prefix+key] = object{data: data, modTime: s.ns.now().UTC()}
	return nil
}

// Stat implements storage.Store.Stat: size in bytes, ModTime in UTC from
// the namespace clock at the Put. Errors, each naming the key and store
// URL: ctx.Err(); storage.ErrInvalidKey; storage.ErrNotFound when no
// object has the key.
func (s *Store) Stat(ctx context.Context, key string) (storage.Info, error) {
	if err := s.check(ctx, "stat", key); err != nil {
		return storage.Info{}, err
	}
	o, err := s.lookupObject("stat", key)
	if err != nil {
		return storage.Info{}, err
	}
	return storage.Info{Key: key, Size: int64(len(o.data)), ModTime: o.modTime}, nil
}

// List implements storage.Store.List: the objects whose key starts with
// prefix, sorted by key. Its only error is ctx.Err(), checked once before
// the listing and wrapped with the prefix and store URL.
func (s *Store) List(ctx context.Context, prefix string) ([]storage.Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list %q in %s: %w", prefix, s.url, err)
	}
	full := s.prefix + prefix
	s.ns.mu.RLock()
	out := []storage.Info{}
	for k, o := range s.ns.objects {
		if strings.HasPrefix(k, full) {
			out = append(out, storage.Info{Key: k[len(s.prefix):], Size: int64(len(o.data)), ModTime: o.modTime})
		}
	}
	s.ns.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete implements storage.Store.Delete. Errors, each naming the key and
// store URL: ctx.Err(); storage.ErrInvalidKey; storage.ErrNotFound when no
// object has the key.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.check(ctx, "delete", key); err != nil {
		return err
	}
	s.ns.mu.Lock()
	defer s.ns.mu.Unlock()
	if _, ok := s.ns.objects[s.prefix+key]; !ok {
		return fmt.Errorf("delete %s in %s: %w", key, s.url, storage.ErrNotFound)
	}
	delete(s.ns.objects, s.prefix+key)
	return nil
}

// URL returns the URL the store was opened with.
func (s *Store) URL() string { return s.url }

// Close implements storage.Store.Close. It does nothing and always
// returns nil: the namespace outlives the store by design (see the
// package doc); use Forget to drop it.
func (s *Store) Close() error { return nil }

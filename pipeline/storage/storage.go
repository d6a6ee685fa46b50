// Package storage is the one narrow interface the pipeline uses to reach
// object storage: a local directory (file://), an S3-compatible bucket
// (s3://), or process memory (mem://, for tests).
//
// The contract is written on Store and checked for every backend by the
// conformance suite in storage/storagetest. Keys are slash-separated,
// relative, never start with "/" and never contain "." or ".." segments;
// they name objects, not directories.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"
)

// Sentinel errors callers branch on. Backends wrap them with context
// (the key and the backend), so test with errors.Is.
var (
	// ErrNotFound is returned by Get, GetRange, Stat and Delete when the key
	// does not exist.
	ErrNotFound = errors.New("object not found")
	// ErrExists is returned by PutIfAbsent when the key already exists.
	ErrExists = errors.New("object already exists")
	// ErrInvalidKey is returned for a key that breaks the key rules above.
	ErrInvalidKey = errors.New("invalid key")
	// ErrUnknownScheme is returned by Open for a URL scheme no backend
	// registered.
	ErrUnknownScheme = errors.New("unknown store URL scheme")
	// ErrBadURL is wrapped (see BadURL) by a backend's error for a store
	// URL it cannot use: an unknown or malformed parameter, a missing
	// bucket, a non-local host. The CLI maps it to exit code 2 (usage).
	ErrBadURL = errors.New("invalid store URL")
)

// BadURL marks err as a bad store URL (errors.Is(err, ErrBadURL)) without
// changing its message, which already names the URL and the parameter.
func BadURL(err error) error { return badURL{err} }

type badURL struct{ error }

func (b badURL) Unwrap() []error { return []error{b.error, ErrBadURL} }

// Info describes one stored object.
type Info struct {
	// Key is the object's key relative to the store root.
	Key string
	// Size is the object's length in bytes.
	Size int64
	// ModTime is the object's last-modified time as reported by the backend
	// (UTC, second precision or better). gc uses it for its grace period.
	ModTime time.Time
}

// Store is the storage contract every backend honours (file://, s3://,
// mem://; the conformance suite in storage/storagetest checks it for each).
// Methods are safe for concurrent use. Sizes and offsets are in bytes.
//
// Rules common to every method that takes a key: a key that breaks the key
// rules of the package doc gives an error wrapping ErrInvalidKey (the file
// backend also rejects segments starting with ".spade-tmp-", its temp-file
// prefix); a ctx that is already done, or is cancelled during the call,
// gives an error wrapping ctx.Err(). Errors name the operation, the key
// (the prefix for List) and the store URL; test them with errors.Is. Other
// errors are the backend's own (an I/O error, an HTTP failure after the S3
// SDK's retries).
type Store interface {
	// Get returns a reader over the whole object; the caller closes it.
	// Reads fail with ctx.Err() once ctx is done. Errors: ErrNotFound
	// (wrapped) when no object has the key (for the file backend also
	// when the key is a directory of other keys or a parent of the key is
	// an object); ErrInvalidKey; ctx.Err().
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// GetRange returns a reader over length bytes starting at offset; the
	// caller closes it. A range that runs past the end is cut at the end,
	// and an offset at or past the end gives an empty reader (not an
	// error). Errors: ErrNotFound (wrapped) when the object is absent;
	// ErrInvalidKey; a plain error for a negative offset or length;
	// ctx.Err().
	GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
	// Put stores the bytes r yields under key, replacing any object there.
	// It is atomic: readers see the old object or the whole new one, never
	// a prefix. size is the number of bytes r yields, or -1 if unknown; a
	// reader that yields more or fewer bytes than a size >= 0 fails the
	// call ("reader length does not match declared size") and stores
	// nothing, as does a failed read or a cancelled ctx. Errors:
	// ErrInvalidKey; ctx.Err(); the reader's error; for the file backend,
	// an error when the key is the directory of other keys ("a" when
	// "a/b" exists) or a parent of the key is an object.
	Put(ctx context.Context, key string, r io.Reader, size int64) error
	// PutIfAbsent is Put that stores nothing and returns an error wrapping
	// ErrExists when an object already has the key. Among any number of
	// concurrent PutIfAbsent calls on one key exactly one succeeds, also
	// across processes for the file and S3 backends (S3: a conditional
	// write with If-None-Match: *; file: link(2); mem: one lock held for
	// the check and the store). The S3 backend tags its object with a
	// random token, so a call whose first request did create the object
	// before the SDK retried it still returns nil. Errors: ErrExists;
	// otherwise those of Put.
	PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error
	// Stat returns the object's Info (key, size in bytes, modification
	// time in UTC) without reading it. Errors: ErrNotFound (wrapped) when
	// the object is absent; ErrInvalidKey; ctx.Err().
	Stat(ctx context.Context, key string) (Info, error)
	// List returns the Info of every object whose key starts with prefix,
	// a plain string prefix ("a/b" also matches "a/bc/d"; "" matches
	// every key), sorted by key. No match gives an empty, non-nil slice
	// and no error; prefix is not checked against the key rules. The file
	// backend never lists its temp files; the S3 backend skips objects
	// whose keys break the key rules (such as "dir/" markers other tools
	// make). Errors: ctx.Err(); the backend's I/O or HTTP error.
	List(ctx context.Context, prefix string) ([]Info, error)
	// Delete removes the object. Errors: ErrNotFound (wrapped) when the
	// object is absent; ErrInvalidKey; ctx.Err(). On S3 the absence check
	// is a HEAD before the DELETE, so two concurrent Deletes of one key
	// may both return nil. The file backend also removes the parent
	// directories the deletion left empty.
	Delete(ctx context.Context, key string) error
	// URL returns the URL the store was opened with, with user info and
	// secret-looking query values removed (see Redact).
	URL() string
	// Close releases the backend's resources (the S3 backend's idle HTTP
	// connections; the file and mem backends hold none and return nil).
	// The store must not be used after Close. It returns nil for every
	// backend in this module.
	Close() error
}

// TempCollector is implemented by a backend whose writes leave a temp
// object behind when the writing process is killed mid-write (the file
// backend's ".spade-tmp-*" files; List never returns them, and no key
// names them). `spade gc` removes the stale ones through it.
type TempCollector interface {
	// ListTemp returns the Info of every temp object whose path relative
	// to the store root starts with prefix (a plain string prefix, as for
	// List), sorted by that path, which is the Info's Key.
	ListTemp(ctx context.Context, prefix string) ([]Info, error)
	// DeleteTemp removes one temp object that ListTemp returned. A key
	// whose last segment is not a temp name is refused (ErrInvalidKey);
	// ErrNotFound (wrapped) when it is gone.
	DeleteTemp(ctx context.Context, key string) error
}

// Opener opens a store from a parsed URL. Registered per scheme.
type Opener func(ctx context.Context, u *url.URL) (Store, error)

var (
	registryMu sync.RWMutex
	registry   = map[string]Opener{}
)

// Register makes a backend available under scheme. It panics on a duplicate
// scheme, since that is a programming error made at init time.
func Register(scheme string, open Opener) {
	registryMu.Lock()
	defer registryMu.Unlock()
	if _, dup := registry[scheme]; dup {
		panic("storage: duplicate scheme " + scheme)
	}
	registry[scheme] = open
}

// Schemes returns the registered URL schemes, sorted.
func Schemes() []string {
	registryMu.RLock()
	defer registryMu.RUnlock()
	out := make([]string, 0, len(registry))
	for s := range registry {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Open opens the store named by rawURL, e.g. "file://./runs",
// "s3://bucket/prefix?endpoint=http://127.0.0.1:7070", "mem://test".
// Errors: ErrBadURL (wrapped) for a URL that does not parse, giving the
// parser's reason but not the URL, which may hold a secret;
// ErrUnknownScheme (wrapped, naming the scheme and the known ones); or the
// backend's own error naming the URL, redacted.
func Open(ctx context.Context, rawURL string) (Store, error) {
	u, err := ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	registryMu.RLock()
	open, ok := registry[u.Scheme]
	registryMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("store URL %q: %w %q (known: %s)", Redact(rawURL), ErrUnknownScheme, u.Scheme, strings.Join(Schemes(), ", "))
	}
	return open(ctx, u)
}

// ParseURL parses a store URL (url.Parse). Its error wraps ErrBadURL and
// gives the parser's reason but not the URL: url.Parse's own error quotes
// the whole URL, and a store URL may hold a secret that Redact cannot strip
// from text that does not parse.
func ParseURL(rawURL string) (*url.URL, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, BadURL(fmt.Errorf("store URL (not shown: it may hold a secret) cannot be parsed: %w", err))
	}
	return u, nil
}

// ValidateKey checks the key rules of the package doc. It returns an error
// wrapping ErrInvalidKey that names the key.
func ValidateKey(key string) error {
	if key == "" || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") || strings.Contains(key, "\x00") {
		return fmt.Errorf("%w: %q", ErrInvalidKey, key)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: %q", ErrInvalidKey, key)
		}
	}
	return nil
}

// Redact returns rawURL with any user info and secret-looking query values
// removed, for logs and error messages.
func Redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "<unparseable URL>"
	}
	u.User = nil
	q := u.Query()
	for k := range q {
		lk := strings.ToLower(k)
		if strings.Contains(lk, "secret") || strings.Contains(lk, "key") || strings.Contains(lk, "token") || strings.Contains(lk, "password") {
			q.Set(k, "REDACTED")
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// ReadAll reads a whole object into memory. For manifests and other small
// objects; part files go through ReaderAt. An error from s.Get (ErrNotFound,
// ErrInvalidKey, ctx.Err(), all wrapped by the backend) is returned as it
// is; an error while reading the body is wrapped as "read <key>".
func ReadAll(ctx context.Context, s Store, key string) ([]byte, error) {
	rc, err := s.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return b, nil
}

// PutBytes stores b under key with Put, declaring len(b) bytes. It returns
// s.Put's error unchanged (see Store.Put).
func PutBytes(ctx context.Context, s Store, key string, b []byte) error {
	return s.Put(ctx, key, strings.NewReader(string(b)), int64(len(b)))
}

// PutBytesIfAbsent stores b under key with PutIfAbsent, declaring len(b)
// bytes. It returns s.PutIfAbsent's error unchanged: one wrapping ErrExists
// when the key is taken, else those of Store.Put.
func PutBytesIfAbsent(ctx context.Context, s Store, key string, b []byte) error {
	return s.PutIfAbsent(ctx, key, strings.NewReader(string(b)), int64(len(b)))
}

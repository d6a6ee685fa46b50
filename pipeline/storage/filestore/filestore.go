// Package filestore is the file:// storage backend: objects are files under
// a root directory, key "a/b/c" at ROOT/a/b/c.
//
// URL forms (RFC 8089 plus the common relative shorthand):
//
//	file:///abs/dir         absolute path /abs/dir
//	file://localhost/abs    absolute path /abs (RFC 8089 local host)
//	file://./runs           relative path ./runs: a host of "." or ".."
//	file://../data/runs     is the first segment of a relative path
//	file:runs               relative path runs (opaque form)
//
// Relative paths are resolved against the working directory once, at Open,
// so a later chdir does not move the store. Any other host is an error: this
// backend reaches only the local file system. The root directory is created
// (with parents) if missing.
//
// Durability and atomicity follow the usual publish protocol (as in
// Prometheus tsdb): Put writes a temp file in the target's directory,
// fsyncs it, renames it over the key and fsyncs the directory; PutIfAbsent
// instead link(2)s the temp file to the key, which fails with EEXIST if the
// key exists, even when the racing writer is another process, then removes
// the temp name and fsyncs the directory. New directories are fsynced into
// their parents.
//
// Temp files are named ".spade-tmp-*" and List never returns them; keys
// with a segment starting with ".spade-tmp-" are therefore rejected with
// storage.ErrInvalidKey. Because keys are files, a key cannot also be the
// directory of another key ("a" and "a/b" cannot both exist): such a Put
// fails with an error naming both.
package filestore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/internal/streams"
)

// TempPrefix starts the name of every temp file this backend writes. List
// skips such names; keys containing a segment with this prefix are invalid.
const TempPrefix = ".spade-tmp-"

func init() {
	storage.Register("file", func(_ context.Context, u *url.URL) (storage.Store, error) {
		return OpenURL(u)
	})
}

// Store is a file:// store rooted at one directory. Methods are safe for
// concurrent use by goroutines and by other processes opening the same root.
type Store struct {
	root string // absolute, cleaned
	url  string
}

var _ storage.Store = (*Store)(nil)

// RootFromURL returns the directory a file:// URL names, following the
// forms in the package doc, without touching the file system beyond
// resolving a relative path against the working directory. A scheme other
// than file, user info, a query or fragment, a host other than "",
// "localhost", "." or "..", or an empty path gives an error wrapping
// storage.ErrBadURL (storage.BadURL); failing to read the working
// directory gives a plain error. Errors quote the URL redacted.
func RootFromURL(u *url.URL) (string, error) {
	raw := storage.Redact(u.String())
	if u.Scheme != "file" {
		return "", storage.BadURL(fmt.Errorf("file store URL %q: scheme is not file", raw))
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", storage.BadURL(fmt.Errorf("file store URL %q: user info, query and fragment are not supported", raw))
	}
	var p string
	switch {
	case u.Opaque != "":
		p = u.Opaque
	case u.Host == "" || u.Host == "localhost":
		p = u.Path
	case u.Host == "." || u.Host == "..":
		p = u.Host + u.Path
	default:
		return "", storage.BadURL(fmt.Errorf("file store URL %q: host %q is not local (use file:///abs/dir or file://./rel/dir)", raw, u.Host))
	}
	if p == "" {
		return "", storage.BadURL(fmt.Errorf("file store URL %q: empty path", raw))
	}
	abs, err := filepath.Abs(filepath.FromSlash(p))
	if err != nil {
		return "", fmt.Errorf("file store URL %q: %w", raw, err)
	}
	return abs, nil
}

// OpenURL opens the store a file:// URL names (see the package doc). The
// root directory is created by the first write, so read-only commands
// (status, diff) leave no directory behind. Errors name the URL.
func OpenURL(u *url.URL) (*Store, error) {
	root, err := RootFromURL(u)
	if err != nil {
		return nil, err
	}
	s, err := New(root)
	if err != nil {
		return nil, fmt.Errorf("open file store %q: %w", u.String(), err)
	}
	s.url = u.String()
	return s, nil
}

// New opens a store rooted at dir (made absolute). A missing root is
// created by the first write (and reads find nothing until then); a root
// that exists but is not a directory is an error.
func New(dir string) (*Store, error) {
	root, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("file store root %s: %w", dir, err)
	}
	st, err := os.Stat(root)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("file store root: %w", err)
	case !st.IsDir():
		return nil, fmt.Errorf("file store root %s is not a directory", root)
	}
	return &Store{root: root, url: (&url.URL{Scheme: "file", Path: filepath.ToSlash(root)}).String()}, nil
}

// Root returns the store's absolute root directory.
func (s *Store) Root() string { return s.root }

// path validates key and maps it under the root. ValidateKey already bans
// "..", "." and leading "/", so the joined path cannot leave the root; the
// final prefix check is defence in depth against a future change there.
func (s *Store) path(op, key string) (string, error) {
	if err := storage.ValidateKey(key); err != nil {
		return "", fmt.Errorf("%s in %s: %w", op, s.url, err)
	}
	for _, seg := range strings.Split(key, "/") {
		if strings.HasPrefix(seg, TempPrefix) {
			return "", fmt.Errorf("%s in %s: %w: %q: segment prefix %q is reserved for temp files", op, s.url, storage.ErrInvalidKey, key, TempPrefix)
		}
	}
	p := filepath.Join(s.root, filepath.FromSlash(key))
	if !strings.HasPrefix(p, s.root+string(filepath.Separator)) {
		return "", fmt.Errorf("%s in %s: %w: %q escapes the root", op, s.url, storage.ErrInvalidKey, key)
	}
	return p, nil
}

func (s *Store) begin(ctx context.Context, op, key string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("%s %s in %s: %w", op, key, s.url, err)
	}
	return s.path(op, key)
}

// notFound reports whether err means the key has no object: the file is
// missing, a parent is a regular file (ENOTDIR), or the path is a directory.
func notFound(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.EISDIR)
}

// open opens key's file for reading and maps "missing" and "is a
// directory" to ErrNotFound.
func (s *Store) open(op, key, p string) (*os.File, os.FileInfo, error) {
	f, err := os.Open(p)
	if err != nil {
		if notFound(err) {
			return nil, nil, fmt.Errorf("%s %s in %s: %w", op, key, s.url, storage.ErrNotFound)
		}
		return nil, nil, fmt.Errorf("%s %s in %s: %w", op, key, s.url, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("%s %s in %s: %w", op, key, s.url, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s %s in %s: %w", op, key, s.url, storage.ErrNotFound)
	}
	return f, st, nil
}

// Get implements storage.Store.Get. Errors, each naming the operation, key
// and store URL: ctx.Err() (also from Read once ctx is done);
// storage.ErrInvalidKey, also for a segment starting with TempPrefix;
// storage.ErrNotFound when the file is missing, is a directory or other
// non-regular file, or a parent of it is a regular file; else the file
// system's open or stat error. Symbolic links are followed.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := s.begin(ctx, "get", key)
	if err != nil {
		return nil, err
	}
	f, _, err := s.open("get", key, p)
	if err != nil {
		return nil, err
	}
	return streams.ReadCloserWithContext(ctx, f), nil
}

type sectionCloser struct {
	*io.SectionReader
	f *os.File
}

func (s sectionCloser) Close() error { return s.f.Close() }

// GetRange implements storage.Store.GetRange: length bytes from offset,
// cut at the end of the file (offset and length in bytes). Errors are
// those of Get, plus a plain error for a negative offset or length
// (checked after the key, before the file is opened).
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	p, err := s.begin(ctx, "get range", key)
	if err != nil {
		return nil, err
	}
	if offset < 0 || length < 0 {
		return nil, fmt.Errorf("get range %s in %s: negative offset %d or length %d", key, s.url, offset, length)
	}
	f, st, err := s.open("get range", key, p)
	if err != nil {
		return nil, err
	}
	size := st.Size()
	start, end := min(offset, size), min(offset+length, size)
	if offset+length < offset {
		end = size
	}
	return streams.ReadCloserWithContext(ctx, sectionCloser{SectionReader: io.NewSectionReader(f, start, end-start), f: f}), nil
}

// Put implements storage.Store.Put: temp file + fsync + rename + dir
// fsync. Errors, each wrapped as "put <key> in <url>": ctx.Err() (before,
// during and after the copy); storage.ErrInvalidKey;
// streams.ErrSizeMismatch when r yields other than size bytes (size >= 0);
// r's read error; "a parent of the key is itself an object"; "key is the
// directory of other keys"; or the file system's create, write, fsync,
// close or rename error. On error the temp file is removed and nothing is
// stored, except that a failed fsync of the directory after the rename is
// reported although the new object is in place.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.put(ctx, "put", key, r, size, false)
}

// PutIfAbsent implements storage.Store.PutIfAbsent: temp file + fsync +
// link(2) + dir fsync. link(2) is atomic across processes, so exactly one
// of any number of racing writers wins. Errors are those of Put, wrapped
// as "put if absent <key> in <url>", with storage.ErrExists when any
// non-directory (a symbolic link included) already has the key's name; a
// directory there gives "key is the directory of other keys" instead. A
// failed fsync of the directory after the link is reported although the
// object is in place.
func (s *Store) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	return s.put(ctx, "put if absent", key, r, size, true)
}

func (s *Store) put(ctx context.Context, op, key string, r io.Reader, size int64, exclusive bool) (err error) {
	p, err := s.begin(ctx, op, key)
	if err != nil {
		return err
	}
	fail := func(err error) error { return fmt.Errorf("%s %s in %s: %w", op, key, s.url, err) }
	dir := filepath.Dir(p)
	tmp, err := s.createTemp(dir)
	if err != nil {
		return fail(err)
	}
	tmpName := tmp.Name()
	defer func() {
		if tmp != nil {
			tmp.Close()
		}
		if err != nil || exclusive {
			// After a successful link the temp name is a second link to the
			// object; removing it leaves the object in place. A failure to
			// remove it is not reported: the object is committed (a caller
			// retrying would wrongly get ErrExists) and List hides temp names.
			_ = os.Remove(tmpName)
		}
	}()
	if _, err := io.Copy(tmp, streams.Sized(streams.WithContext(ctx, r), size)); err != nil {
		return fail(fmt.Errorf("write: %w", err))
	}
	if err := tmp.Sync(); err != nil {
		return fail(fmt.Errorf("fsync: %w", err))
	}
	if err := tmp.Close(); err != nil {
		tmp = nil
		return fail(fmt.Errorf("close: %w", err))
	}
	tmp = nil
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if exclusive {
		if err := os.Link(tmpName, p); err != nil {
			if errors.Is(err, fs.ErrExist) {
				if st, serr := os.Lstat(p); serr == nil && st.IsDir() {
					return fail(fmt.Errorf("key is the directory of other keys: %w", err))
				}
				return fail(storage.ErrExists)
			}
			return fail(err)
		}
	} else if err := os.Rename(tmpName, p); err != nil {
		if errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			return fail(fmt.Errorf("key is the directory of other keys: %w", err))
		}
		return fail(err)
	}
	if err := syncDir(dir); err != nil {
		return fail(err)
	}
	return nil
}

// createTemp creates a temp file in dir, creating dir (and fsyncing new
// directories into their parents) when it is missing. It retries once
// because a concurrent Delete may remove a just-emptied parent between our
// mkdir and create.
func (s *Store) createTemp(dir string) (*os.File, error) {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var f *os.File
		f, err = os.CreateTemp(dir, TempPrefix+"*")
		if err == nil {
			return f, nil
		}
		if errors.Is(err, syscall.ENOTDIR) {
			rel, _ := filepath.Rel(s.root, dir)
			return nil, fmt.Errorf("a parent of the key is itself an object (%s): %w", filepath.ToSlash(rel), err)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		if err = mkdirAll(dir); err != nil {
			if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrExist) {
				rel, _ := filepath.Rel(s.root, dir)
				return nil, fmt.Errorf("a parent of the key is itself an object (%s): %w", filepath.ToSlash(rel), err)
			}
			return nil, err
		}
	}
	return nil, err
}

// mkdirAll is os.MkdirAll that also fsyncs each parent that gained a new
// directory, so a crash cannot lose the path to an fsynced file.
func mkdirAll(dir string) error {
	st, err := os.Stat(dir)
	if err == nil {
		if st.IsDir() {
			return nil
		}
		return fmt.Errorf("mkdir %s: %w", dir, syscall.ENOTDIR)
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			if st, serr := os.Stat(dir); serr == nil && st.IsDir() {
				return nil // created concurrently
			}
		}
		return err
	}
	return syncDir(parent)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir for fsync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}

// Stat implements storage.Store.Stat, following symbolic links; size is
// in bytes, ModTime in UTC. Errors, each naming the key and store URL:
// ctx.Err(); storage.ErrInvalidKey; storage.ErrNotFound in the cases Get
// gives it; else the file system's stat error.
func (s *Store) Stat(ctx context.Context, key string) (storage.Info, error) {
	p, err := s.begin(ctx, "stat", key)
	if err != nil {
		return storage.Info{}, err
	}
	st, err := os.Stat(p)
	if err != nil {
		if notFound(err) {
			return storage.Info{}, fmt.Errorf("stat %s in %s: %w", key, s.url, storage.ErrNotFound)
		}
		return storage.Info{}, fmt.Errorf("stat %s in %s: %w", key, s.url, err)
	}
	if !st.Mode().IsRegular() {
		return storage.Info{}, fmt.Errorf("stat %s in %s: %w", key, s.url, storage.ErrNotFound)
	}
	return storage.Info{Key: key, Size: st.Size(), ModTime: st.ModTime().UTC()}, nil
}

// List implements storage.Store.List: it walks only the directories that
// can hold keys with the prefix (a plain string prefix, so "a/b" also
// matches "a/bc/d"), skipping temp files, and returns the objects sorted
// by key. A missing root or directory, or a prefix whose part up to the
// last "/" is not a valid key, gives an empty list and nil. Errors, wrapped
// with the prefix and store URL: ctx.Err() (checked before and during the
// walk), or a file system error while walking (entries removed meanwhile
// are skipped, not errors).
func (s *Store) List(ctx context.Context, prefix string) ([]storage.Info, error) {
	return s.walk(ctx, "list", prefix, false)
}

// walk lists the regular files whose key starts with prefix, sorted by
// key: the objects (temp files and directories skipped) or, with temp,
// only the temp files. It walks from the deepest directory every match
// lies under and prunes directories that cannot hold a match; entries
// removed meanwhile are left out. Errors name op, the prefix and the
// store.
func (s *Store) walk(ctx context.Context, op, prefix string, temp bool) ([]storage.Info, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s %q in %s: %w", op, prefix, s.url, err)
	}
	// The deepest directory every match lies under: everything up to the
	// prefix's last "/".
	start := s.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		dirKey := prefix[:i]
		if storage.ValidateKey(dirKey) != nil {
			return []storage.Info{}, nil // no valid key can have this prefix
		}
		start = filepath.Join(s.root, filepath.FromSlash(dirKey))
	}
	out := []storage.Info{}
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == start && notFound(err) {
				return fs.SkipAll
			}
			if notFound(err) { // removed while walking
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		isTemp := strings.HasPrefix(d.Name(), TempPrefix)
		if isTemp && !temp {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(s.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if d.IsDir() {
			if p == start || p == s.root {
				return nil
			}
			// Prune directories that cannot contain a match.
			if !strings.HasPrefix(key+"/", prefix) && !strings.HasPrefix(prefix, key+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || isTemp != temp || !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if notFound(err) {
				return nil
			}
			return err
		}
		out = append(out, storage.Info{Key: key, Size: info.Size(), ModTime: info.ModTime().UTC()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s %q in %s: %w", op, prefix, s.url, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete implements storage.Store.Delete: it removes the object and then
// any parent directories it left empty, so the key space stays free for a
// later key equal to one of those directory names (failures there are
// ignored). Errors, each naming the key and store URL: ctx.Err();
// storage.ErrInvalidKey; storage.ErrNotFound when the path is absent or is
// not a regular file (a directory, or a symbolic link, which is not
// followed); else the file system's remove error.
func (s *Store) Delete(ctx context.Context, key string) error {
	p, err := s.begin(ctx, "delete", key)
	if err != nil {
		return err
	}
	return s.remove("delete", key, p)
}

// remove deletes the regular file p (key) and then the parent directories
// it left empty. Errors name op, key and the store: storage.ErrNotFound
// when p is absent or not a regular file, else the file system's.
func (s *Store) remove(op, key, p string) error {
	st, err := os.Lstat(p)
	if err == nil && !st.Mode().IsRegular() {
		err = fs.ErrNotExist
	}
	if err == nil {
		err = os.Remove(p)
	}
	if notFound(err) {
		return fmt.Errorf("%s %s in %s: %w", op, key, s.url, storage.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("%s %s in %s: %w", op, key, s.url, err)
	}
	for dir := filepath.Dir(p); dir != s.root && strings.HasPrefix(dir, s.root); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil { // not empty (or gone): stop
			break
		}
	}
	return nil
}

var _ storage.TempCollector = (*Store)(nil)

// ListTemp returns the temp files (TempPrefix) whose path relative to the
// root starts with prefix, sorted by key, with size in bytes and UTC
// modification time: what writers killed between creating and publishing
// a file left behind (storage.TempCollector). A prefix that names no
// directory gives an empty list. Errors: ctx's, and those of walking the
// directory tree (other than entries that vanish meanwhile), wrapped with
// the prefix and the store's URL.
func (s *Store) ListTemp(ctx context.Context, prefix string) ([]storage.Info, error) {
	return s.walk(ctx, "list temp", prefix, true)
}

// DeleteTemp implements storage.TempCollector.DeleteTemp: it removes one
// temp file ListTemp returned, then the parent directories it left empty.
// Errors, each naming the store URL: ctx.Err(); storage.ErrInvalidKey when
// the last segment does not start with TempPrefix or holds a NUL, the
// directory part is not a valid key, or the path leaves the root;
// storage.ErrNotFound when the file is gone or not a regular file; else
// the file system's remove error.
func (s *Store) DeleteTemp(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete temp %s in %s: %w", key, s.url, err)
	}
	name, dirOK := key, true
	if i := strings.LastIndex(key, "/"); i >= 0 {
		name, dirOK = key[i+1:], storage.ValidateKey(key[:i]) == nil
	}
	if !strings.HasPrefix(name, TempPrefix) || strings.Contains(name, "\x00") || !dirOK {
		return fmt.Errorf("delete temp in %s: %w: %q is not a temp file", s.url, storage.ErrInvalidKey, key)
	}
	p := filepath.Join(s.root, filepath.FromSlash(key))
	if !strings.HasPrefix(p, s.root+string(filepath.Separator)) {
		return fmt.Errorf("delete temp in %s: %w: %q escapes the root", s.url, storage.ErrInvalidKey, key)
	}
	return s.remove("delete temp", key, p)
}

// URL returns the URL the store was opened with.
func (s *Store) URL() string { return s.url }

// Close implements storage.Store.Close. It does nothing and always
// returns nil; a file store holds no open resources between calls.
func (s *Store) Close() error { return nil }

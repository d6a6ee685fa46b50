package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// ReaderAt reads one stored object at arbitrary offsets through
// Store.GetRange, so a Parquet reader (parquet-go's OpenFile takes an
// io.ReaderAt and a size) fetches only the footer and the row groups it
// needs instead of the whole part file.
//
// io.ReaderAt has no context parameter, so the context given to NewReaderAt
// is kept and used for every ReadAt; cancel it to abort outstanding reads.
// A ReaderAt is safe for concurrent ReadAt calls if its Store is (all
// backends in this module are). It holds no resources and needs no Close.
type ReaderAt struct {
	ctx  context.Context
	s    Store
	key  string
	size int64
}

// NewReaderAt stats key once and returns a ReaderAt over it. The size is
// fixed at that moment: objects are immutable once written in this
// pipeline, and a reader that saw the size change mid-file could only
// produce garbage. Errors: Stat's (ErrNotFound wrapped, ErrInvalidKey, ctx).
func NewReaderAt(ctx context.Context, s Store, key string) (*ReaderAt, error) {
	info, err := s.Stat(ctx, key)
	if err != nil {
		return nil, err
	}
	return &ReaderAt{ctx: ctx, s: s, key: key, size: info.Size}, nil
}

// Size returns the object's length in bytes as of NewReaderAt.
func (r *ReaderAt) Size() int64 { return r.size }

// Key returns the key the ReaderAt reads.
func (r *ReaderAt) Key() string { return r.key }

// ReadAt implements io.ReaderAt with one GetRange request per call. As
// io.ReaderAt requires, it returns io.EOF when fewer than len(p) bytes
// remain and a non-nil error whenever n < len(p).
func (r *ReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read %s at offset %d: negative offset", r.key, off)
	}
	if off >= r.size {
		return 0, io.EOF
	}
	want := int64(len(p))
	short := false
	if rem := r.size - off; want > rem {
		want, short = rem, true
	}
	if want == 0 {
		return 0, nil
	}
	rc, err := r.s.GetRange(r.ctx, r.key, off, want)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	n, err := io.ReadFull(rc, p[:want])
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return n, fmt.Errorf("read %s bytes %d-%d: object shorter than its stat size %d: %w", r.key, off, off+want-1, r.size, io.ErrUnexpectedEOF)
		}
		return n, fmt.Errorf("read %s bytes %d-%d: %w", r.key, off, off+want-1, err)
	}
	if short {
		return n, io.EOF
	}
	return n, nil
}

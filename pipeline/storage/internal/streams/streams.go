// Package streams holds the small io wrappers every storage backend shares:
// a reader that stops when its context is cancelled and a reader that
// enforces the size a caller promised to Put.
package streams

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// ErrSizeMismatch is returned (wrapped) by a Sized reader whose source
// yields more or fewer bytes than the size the caller declared.
var ErrSizeMismatch = errors.New("reader length does not match declared size")

// ctxReader fails the next Read once ctx is done, so a long copy into a
// temp file or an upload stops within one buffer of the cancellation.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

// WithContext returns r wrapped so that every Read first checks ctx and
// returns ctx.Err() once it is done.
func WithContext(ctx context.Context, r io.Reader) io.Reader {
	return &ctxReader{ctx: ctx, r: r}
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// ctxReadCloser is ctxReader for the bodies returned by Get and GetRange.
type ctxReadCloser struct {
	ctxReader
	c io.Closer
}

// ReadCloserWithContext is WithContext for an io.ReadCloser; Close closes rc.
func ReadCloserWithContext(ctx context.Context, rc io.ReadCloser) io.ReadCloser {
	return &ctxReadCloser{ctxReader: ctxReader{ctx: ctx, r: rc}, c: rc}
}

func (c *ctxReadCloser) Close() error { return c.c.Close() }

// sized counts bytes and fails when the count disagrees with the declared
// size, so a short or long body never becomes a committed object.
type sized struct {
	r    io.Reader
	want int64
	n    int64
}

// Sized returns r wrapped so that it yields an error wrapping
// ErrSizeMismatch instead of io.EOF when the total read differs from size
// (bytes), and as soon as it exceeds size. A negative size means unknown:
// r is returned unchanged.
func Sized(r io.Reader, size int64) io.Reader {
	if size < 0 {
		return r
	}
	return &sized{r: r, want: size}
}

func (s *sized) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.n += int64(n)
	if s.n > s.want {
		return n, fmt.Errorf("%w: declared %d bytes, got more", ErrSizeMismatch, s.want)
	}
	if errors.Is(err, io.EOF) && s.n != s.want {
		return n, fmt.Errorf("%w: declared %d bytes, got %d", ErrSizeMismatch, s.want, s.n)
	}
	return n, err
}

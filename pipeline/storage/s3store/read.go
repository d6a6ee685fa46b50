package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/spade-pipeline/spade/pipeline/storage/internal/streams"
)

// Get returns the whole object; see storage.Store. The body resumes a
// broken transfer with ranged GETs (resuming). Errors, naming the key and
// the store's URL: ctx's, storage.ErrInvalidKey, storage.ErrNotFound
// (wrapped) for a missing key, else GetObject's.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := s.begin(ctx, "get", key); err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.opts.Bucket, Key: aws.String(s.objectKey(key))})
	if err != nil {
		return nil, s.fail(ctx, "get", key, err)
	}
	return streams.ReadCloserWithContext(ctx, s.resuming(ctx, key, out, 0)), nil
}

// GetRange returns length bytes from offset with one ranged GET (RFC 9110
// Range: bytes=first-last); see storage.Store for the edge cases. A
// zero-length range costs a HEAD, since HTTP cannot express it. Errors,
// naming the key and the store's URL: ctx's, storage.ErrInvalidKey, a
// negative offset or length, storage.ErrNotFound (wrapped), else
// GetObject's; a range past the end (416) is an empty body, not an error.
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if err := s.begin(ctx, "get range", key); err != nil {
		return nil, err
	}
	if offset < 0 || length < 0 {
		return nil, fmt.Errorf("get range %s in %s: negative offset %d or length %d", key, s.url, offset, length)
	}
	if length == 0 {
		if _, err := s.Stat(ctx, key); err != nil {
			return nil, err
		}
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	last := offset + length - 1
	if last < offset { // overflow: read to the end
		last = 1<<63 - 1
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: &s.opts.Bucket, Key: aws.String(s.objectKey(key)),
		Range: aws.String(fmt.Sprintf("bytes=%d-%d", offset, last)),
	})
	if err != nil {
		// 416 means the object exists but the range starts at or past its
		// end (including any range on an empty object).
		if status(err) == http.StatusRequestedRangeNotSatisfiable {
			return io.NopCloser(bytes.NewReader(nil)), nil
		}
		return nil, s.fail(ctx, "get range", key, err)
	}
	return streams.ReadCloserWithContext(ctx, s.resuming(ctx, key, out, offset)), nil
}

// resuming wraps a GetObject body that starts at byte offset of the
// object so that a body broken off mid-transfer (connection reset, closed
// early) is resumed with a ranged GET from the first missing byte, up to
// MaxAttempts times. The SDK's retryer covers requests, not the reading of
// a response body, so without this one dropped connection fails the whole
// read. If-Match pins the ETag: a replaced object is never spliced onto
// the old one's prefix (the resume then fails with 412). Bodies without a
// known length or ETag are returned as they are.
func (s *Store) resuming(ctx context.Context, key string, out *s3.GetObjectOutput, offset int64) io.ReadCloser {
	if out.ContentLength == nil || out.ETag == nil || *out.ContentLength <= 0 {
		return out.Body
	}
	return &resumingBody{ctx: ctx, s: s, key: key, etag: *out.ETag, body: out.Body, next: offset, end: offset + *out.ContentLength}
}

type resumingBody struct {
	ctx     context.Context
	s       *Store
	key     string
	etag    string
	body    io.ReadCloser
	next    int64 // object offset of the next byte to read
	end     int64 // object offset one past the last byte wanted
	resumes int
}

func (b *resumingBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.next += int64(n)
	if err == nil || (errors.Is(err, io.EOF) && b.next >= b.end) {
		return n, err
	}
	if b.next >= b.end || b.ctx.Err() != nil || b.resumes+1 >= b.s.opts.MaxAttempts {
		if silent(b.ctx, err) {
			err = fmt.Errorf("get %s in %s: body stalled at byte %d: %w", b.key, b.s.url, b.next, b.s.noAnswer(b.ctx, err))
		}
		return n, err
	}
	b.resumes++
	_ = b.body.Close()
	out, gerr := b.s.client.GetObject(b.ctx, &s3.GetObjectInput{
		Bucket: &b.s.opts.Bucket, Key: aws.String(b.s.objectKey(b.key)),
		Range:   aws.String(fmt.Sprintf("bytes=%d-%d", b.next, b.end-1)),
		IfMatch: aws.String(b.etag),
	})
	if gerr != nil {
		b.body = io.NopCloser(bytes.NewReader(nil))
		b.end = b.next // no further resumes
		return n, fmt.Errorf("get %s in %s: body broke off at byte %d (%w) and resuming failed: %w", b.key, b.s.url, b.next, err, b.s.noAnswer(b.ctx, gerr))
	}
	b.body = out.Body
	if n > 0 {
		return n, nil
	}
	return b.Read(p)
}

func (b *resumingBody) Close() error { return b.body.Close() }

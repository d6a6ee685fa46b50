package s3store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/internal/streams"
)

// Put uploads the object: a single PutObject when size is known and at
// most the part size, else a multipart upload through the SDK's upload
// manager (aborted on failure or cancellation, so no partial object is
// ever visible); see storage.Store.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := s.begin(ctx, "put", key); err != nil {
		return err
	}
	if err := s.upload(ctx, key, r, size, nil); err != nil {
		return s.fail(ctx, "put", key, err)
	}
	return nil
}

// PutIfAbsent uploads with If-None-Match: * (a conditional PutObject, or a
// conditional CompleteMultipartUpload for large objects), so the server
// decides the race: exactly one writer succeeds and the others get 412
// Precondition Failed, returned as storage.ErrExists.
//
// Retries: the SDK retries a request whose response was lost (timeout,
// reset, 5xx). If the lost attempt had in fact created the object, the
// retry gets 412 although this call won. To report that correctly, every
// PutIfAbsent tags its object with a random token in user metadata
// (x-amz-meta-spade-put-id); after any failure other than cancellation it
// HEADs the key and returns nil when the stored object carries its own
// token. So a 412 means ErrExists only when someone else's object is there.
// A 409 ConditionalRequestConflict (a concurrent conditional write still in
// flight on AWS) is ErrExists if the key now holds another writer's object,
// and otherwise an error the caller may retry.
func (s *Store) PutIfAbsent(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := s.begin(ctx, "put if absent", key); err != nil {
		return err
	}
	var tok [16]byte
	if _, err := rand.Read(tok[:]); err != nil {
		return fmt.Errorf("put if absent %s in %s: make put token: %w", key, s.url, err)
	}
	token := hex.EncodeToString(tok[:])
	err := s.upload(ctx, key, r, size, &token)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("put if absent %s in %s: %w", key, s.url, ctx.Err())
	}
	head, herr := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.opts.Bucket, Key: aws.String(s.objectKey(key))})
	if herr == nil && head.Metadata[putIDMeta] == token {
		return nil // an earlier attempt of this call created it
	}
	code, st := apiCode(err), status(err)
	switch {
	case st == http.StatusPreconditionFailed || code == "PreconditionFailed":
		return fmt.Errorf("put if absent %s in %s: %w", key, s.url, storage.ErrExists)
	case st == http.StatusConflict || code == "ConditionalRequestConflict":
		if herr == nil {
			return fmt.Errorf("put if absent %s in %s: %w", key, s.url, storage.ErrExists)
		}
		return fmt.Errorf("put if absent %s in %s: conflicting concurrent write, object still absent (retry): %w", key, s.url, s.noAnswer(ctx, err))
	}
	return fmt.Errorf("put if absent %s in %s: %w", key, s.url, s.noAnswer(ctx, err))
}

// upload sends the body; token != nil makes it conditional (If-None-Match)
// and tags the object with the token.
func (s *Store) upload(ctx context.Context, key string, r io.Reader, size int64, token *string) error {
	body := streams.Sized(streams.WithContext(ctx, r), size)
	in := &s3.PutObjectInput{
		Bucket:      &s.opts.Bucket,
		Key:         aws.String(s.objectKey(key)),
		ContentType: aws.String("application/octet-stream"),
	}
	if token != nil {
		in.IfNoneMatch = aws.String("*")
		in.Metadata = map[string]string{putIDMeta: *token}
	}
	if size >= 0 && size <= s.opts.PartSize {
		// Small objects, the common case (manifests, shards): buffer exactly
		// once so the SDK can sign the payload and replay it on retries,
		// instead of the upload manager's part-size buffer.
		buf := make([]byte, size)
		if _, err := io.ReadFull(body, buf); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("read body: %w: declared %d bytes, got fewer", streams.ErrSizeMismatch, size)
			}
			return fmt.Errorf("read body: %w", err)
		}
		// The body must end here; one more byte means the size was wrong.
		if n, err := io.ReadFull(body, make([]byte, 1)); n > 0 || !errors.Is(err, io.EOF) {
			if err == nil {
				err = fmt.Errorf("%w: declared %d bytes, got more", streams.ErrSizeMismatch, size)
			}
			return fmt.Errorf("read body: %w", err)
		}
		in.Body = bytes.NewReader(buf)
		in.ContentLength = aws.Int64(size)
		_, err := s.client.PutObject(ctx, in)
		return err
	}
	in.Body = body
	_, err := s.uploader.Upload(ctx, in) //nolint:staticcheck // SA1019: see Store.uploader
	return err
}

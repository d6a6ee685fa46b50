package s3store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/spade-pipeline/spade/pipeline/storage"
)

// noAnswer returns err, from a call under ctx, wrapped with ErrNoAnswer
// and a message naming the bucket, endpoint and limit when err comes from
// a server that stayed silent past ResponseTimeout (a transport or
// connection timeout, not ctx ending); any other err is returned as it is.
func (s *Store) noAnswer(ctx context.Context, err error) error {
	if !silent(ctx, err) {
		return err
	}
	return fmt.Errorf("%w: %s did not answer within %s (response_timeout; max_attempts %d): %w", ErrNoAnswer, s.where, s.opts.ResponseTimeout, s.opts.MaxAttempts, err)
}

// silent reports whether err, from a call under ctx, is a timeout of the
// transport or of a connection (a server that stayed silent), not ctx
// ending, not a connect that timed out, and not already wrapped by
// noAnswer. (net/http's "timeout
// awaiting response headers" matches context.DeadlineExceeded with
// errors.Is, so ctx itself is what tells the two apart.)
func silent(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil || errors.Is(err, ErrNoAnswer) || errors.Is(err, context.Canceled) {
		return false
	}
	// A connect that timed out is an unreachable endpoint, bounded by the
	// dialer, not by response_timeout: its own error says so.
	if oe := (*net.OpError)(nil); errors.As(err, &oe) && oe.Op == "dial" {
		return false
	}
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

func (s *Store) objectKey(key string) string { return s.opts.Prefix + key }

func (s *Store) begin(ctx context.Context, op, key string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s in %s: %w", op, key, s.url, err)
	}
	if err := storage.ValidateKey(key); err != nil {
		return fmt.Errorf("%s in %s: %w", op, s.url, err)
	}
	return nil
}

func status(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// isNotFound: a 404 that is about the key, not the bucket.
func isNotFound(err error) bool {
	return status(err) == http.StatusNotFound && apiCode(err) != "NoSuchBucket"
}

// fail wraps err, from a call under ctx, once, mapping a missing key to
// storage.ErrNotFound and a silent server to ErrNoAnswer (noAnswer).
func (s *Store) fail(ctx context.Context, op, key string, err error) error {
	if isNotFound(err) {
		return fmt.Errorf("%s %s in %s: %w", op, key, s.url, storage.ErrNotFound)
	}
	return fmt.Errorf("%s %s in %s: %w", op, key, s.url, s.noAnswer(ctx, err))
}

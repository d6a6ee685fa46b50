package s3store

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSilent: only a server that stayed silent past response_timeout is
// reported as ErrNoAnswer "did not answer within response_timeout"; a
// connect that timed out (an unreachable endpoint, bounded by the dialer)
// and the caller's own context ending are not.
func TestSilent(t *testing.T) {
	ctx := context.Background()
	timeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
	idle := &idleTimeout{idle: time.Second, err: timeout}
	require.True(t, silent(ctx, fmt.Errorf("operation error S3: GetObject: %w", timeout)))
	require.True(t, silent(ctx, fmt.Errorf("wrapped: %w", idle)))
	require.False(t, silent(ctx, fmt.Errorf("operation error S3: GetObject: %w", dial)), "a dial timeout is not response_timeout's")
	require.False(t, silent(ctx, fmt.Errorf("boom")))
	done, cancel := context.WithCancel(ctx)
	cancel()
	require.False(t, silent(done, fmt.Errorf("x: %w", timeout)), "the caller's context ended")
	s := &Store{where: `bucket "b" at endpoint http://127.0.0.1:1`, opts: Options{ResponseTimeout: time.Second, MaxAttempts: 2}}
	require.ErrorIs(t, s.noAnswer(ctx, timeout), ErrNoAnswer)
	require.NotErrorIs(t, s.noAnswer(ctx, dial), ErrNoAnswer)
}

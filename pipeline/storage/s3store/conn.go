package s3store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// idleTimeoutDialer wraps dial (nil: a plain net.Dialer) so that every
// connection it makes fails a read or write that moves no byte for idle;
// see idleConn.
func idleTimeoutDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error), idle time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &idleConn{Conn: c, idle: idle}, nil
	}
}

// idleConn is a connection whose every Read and Write first pushes the
// deadline of both directions to idle from now. A call blocked on a
// silent peer fails after idle with a timeout (os.ErrDeadlineExceeded),
// which the SDK retries, and which resumingBody resumes. Progress in one
// direction extends the other's deadline too, so the transport's read
// loop, waiting for a response while a large body is still being sent,
// does not time out as long as the upload moves. A connection idle in the
// pool fails its pending read after idle and is dropped, as
// IdleConnTimeout would.
//
// Both directions time out together, and the transport closes the
// connection on the first error it sees, so the other direction then
// fails with "use of closed network connection": once a deadline has
// passed, every error of the connection is reported as an idleTimeout.
type idleConn struct {
	net.Conn
	idle    time.Duration
	expired atomic.Bool
}

func (c *idleConn) Read(p []byte) (int, error) {
	if err := c.Conn.SetDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, c.check(err)
	}
	n, err := c.Conn.Read(p)
	return n, c.check(err)
}

func (c *idleConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, c.check(err)
	}
	n, err := c.Conn.Write(p)
	return n, c.check(err)
}

// check returns err as an idleTimeout when it is a deadline passing, or
// any error after one passed; other errors (and nil) as they are.
func (c *idleConn) check(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		c.expired.Store(true)
	}
	if !c.expired.Load() {
		return err
	}
	return &idleTimeout{idle: c.idle, err: err}
}

// idleTimeout is the error of a connection on which no byte moved for
// idle. It is a timeout (and temporary) for the SDK's retryer and for
// silent.
type idleTimeout struct {
	idle time.Duration
	err  error
}

func (e *idleTimeout) Error() string {
	return fmt.Sprintf("no byte moved on the connection for %s: %v", e.idle, e.err)
}

func (e *idleTimeout) Unwrap() error   { return e.err }
func (e *idleTimeout) Timeout() bool   { return true }
func (e *idleTimeout) Temporary() bool { return true }

package openai

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/modeltest"
)

// logCapture is a slog handler target: every record as one text line in
// a buffer, and each record's message sent on a channel as it is written.
type logCapture struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	seen chan string
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.buf.Write(p)
	select {
	case c.seen <- string(p):
	default:
	}
	return n, err
}

// lines returns the captured lines that contain substr.
func (c *logCapture) lines(substr string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, l := range strings.Split(c.buf.String(), "\n") {
		if l != "" && strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// captureDefaultLog makes slog.Default() write to a buffer for the test:
// the backend logs through slog.Default() unless Config.Logger is set,
// which is how the CLI's --log-level reaches it.
func captureDefaultLog(t *testing.T) *logCapture {
	t.Helper()
	c := &logCapture{seen: make(chan string, 64)}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(c, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return c
}

// closedPortURL is a loopback base URL where nothing listens.
func closedPortURL(t *testing.T) string {
	t.Helper()
	srv, err := modeltest.New()
	require.NoError(t, err)
	srv.Close()
	return srv.URL
}

// TestOutageWarnedAtFirstFailedAttempt: a server that refuses connections
// is reported at WARN right after the first failed attempt, naming the
// endpoint (never the key) and the attempt, while the call is still
// waiting to retry; before, nothing was logged until the stage gave up.
func TestOutageWarnedAtFirstFailedAttempt(t *testing.T) {
	logs := captureDefaultLog(t)
	url := closedPortURL(t)
	t.Setenv(testKeyEnv, testKey)
	b, err := New(Config{BaseURL: url, Model: "m", APIKeyEnv: testKeyEnv, MaxRetries: 5,
		BackoffBase: 10 * time.Second, BackoffMax: 10 * time.Second})
	require.NoError(t, err)
	defer b.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := b.Chat(ctx, simpleRequest())
		done <- err
	}()
	select {
	case <-logs.seen:
	case err := <-done:
		t.Fatalf("the call ended (%v) before any warning", err)
	case <-time.After(3 * time.Second):
		cancel()
		<-done
		t.Fatal("no log line within 3 s of a refused connection; the first retry waits 5-10 s")
	}
	cancel()
	err = <-done
	require.ErrorIs(t, err, context.Canceled)

	warns := logs.lines("level=WARN")
	require.Len(t, warns, 1, logs.buf.String())
	w := warns[0]
	assert.Contains(t, w, url+"/chat/completions")
	assert.Contains(t, w, "attempt=1")
	assert.Contains(t, w, "attempts=6")
	assert.Contains(t, w, "retry_in=")
	// "connection refused", or now and then "connection reset by peer"
	// from the port just closed: either way a transport failure.
	assert.Contains(t, w, "transport: ")
	assert.NotContains(t, logs.buf.String(), testKey)
}

// TestOutageWarningsRateLimited: many failed attempts of many calls give
// one warning per WarnInterval, not one per attempt.
func TestOutageWarningsRateLimited(t *testing.T) {
	logs := captureDefaultLog(t)
	url := closedPortURL(t)
	b, err := New(Config{BaseURL: url, Model: "m", MaxRetries: 3, Concurrency: 4,
		BackoffBase: time.Millisecond, BackoffMax: 2 * time.Millisecond})
	require.NoError(t, err)
	defer b.Close()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			req := simpleRequest()
			req.Seed = int64(i)
			_, err := b.Chat(context.Background(), req)
			assert.True(t, model.Transient(err), "%v", err)
		})
	}
	wg.Wait()
	// 8 calls x 4 attempts = 32 failed attempts within well under the
	// default interval of 30 s: one warning.
	assert.Len(t, logs.lines("level=WARN"), 1, logs.buf.String())
}

// TestOutageRecoveryLogged: after a warning, the first answer is logged
// once ("answers again"); healthy calls log nothing.
func TestOutageRecoveryLogged(t *testing.T) {
	logs := captureDefaultLog(t)
	srv := modeltest.Start(t, modeltest.WithHandler(textHandler("ok")),
		modeltest.WithFaultSequence(
			modeltest.Fault{Kind: modeltest.FaultUnavailable},
			modeltest.Fault{Kind: modeltest.FaultUnavailable},
			modeltest.Fault{Kind: modeltest.FaultUnavailable},
		))
	b := newBackend(t, srv, nil)
	_, err := b.Chat(context.Background(), simpleRequest())
	require.NoError(t, err)
	warns := logs.lines("level=WARN")
	require.Len(t, warns, 1, logs.buf.String())
	assert.Contains(t, warns[0], "HTTP 503")
	assert.Contains(t, warns[0], srv.URL+"/chat/completions")
	back := logs.lines("answers again")
	require.Len(t, back, 1, logs.buf.String())
	assert.Contains(t, back[0], "failed_attempts=3")

	// Healthy calls log nothing more.
	_, err = b.Chat(context.Background(), simpleRequest())
	require.NoError(t, err)
	assert.Len(t, logs.lines("level="), 2, logs.buf.String())
}

// TestOutageWarningAfterInterval: Config.Logger receives the warnings, and
// once WarnInterval has passed the next failed attempt warns again,
// counting the attempts it did not log.
func TestOutageWarningAfterInterval(t *testing.T) {
	logs := &logCapture{seen: make(chan string, 64)}
	url := closedPortURL(t)
	b, err := New(Config{BaseURL: url, Model: "m", MaxRetries: 2, WarnInterval: 100 * time.Millisecond,
		BackoffBase: time.Millisecond, BackoffMax: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	require.NoError(t, err)
	defer b.Close()
	_, err = b.Chat(context.Background(), simpleRequest())
	require.Error(t, err)
	require.Len(t, logs.lines("level=WARN"), 1, logs.buf.String())
	time.Sleep(150 * time.Millisecond)
	_, err = b.Chat(context.Background(), simpleRequest())
	require.Error(t, err)
	warns := logs.lines("level=WARN")
	require.Len(t, warns, 2, logs.buf.String())
	assert.Contains(t, warns[1], "failed_attempts=4")
	assert.Contains(t, warns[1], "not_logged=2")
}

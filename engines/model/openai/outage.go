package openai

import (
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spade-pipeline/spade/engines/model"
)

// outage tracks failed attempts for the warnings of Config.Logger. It
// only decides what is logged; no call's result depends on it.
type outage struct {
	failing atomic.Bool // a failed attempt was seen and no answer since

	mu       sync.Mutex
	since    time.Time // when the current run of failures began
	failed   int       // failed attempts since then
	warned   bool      // a warning was written during this run
	lastWarn time.Time // when the last warning was written (any run)
	quiet    int       // failed attempts since lastWarn not warned about
}

// noteFailure logs a retryable failed attempt (index attempt, from 0) at
// WARN when it starts a run of failures or WarnInterval has passed since
// the last warning; otherwise it only counts it. retrying says whether
// the call waits next before another attempt.
func (b *Backend) noteFailure(cerr *model.CallError, attempt int, retrying bool, next time.Duration) {
	now := time.Now()
	o := &b.outage
	o.mu.Lock()
	if !o.failing.Load() {
		o.failing.Store(true)
		o.since, o.failed, o.warned = now, 0, false
	}
	o.failed++
	if !o.lastWarn.IsZero() && now.Sub(o.lastWarn) < b.cfg.WarnInterval {
		o.quiet++
		o.mu.Unlock()
		return
	}
	failed, since, quiet := o.failed, o.since, o.quiet
	o.warned, o.lastWarn, o.quiet = true, now, 0
	o.mu.Unlock()

	e := *cerr
	e.Attempts = 0 // the attempt is an attribute of its own
	msg := "model server call failed; giving up on this call"
	attrs := []any{"backend", b.name, "endpoint", b.endpoint, "attempt", attempt + 1, "attempts", b.cfg.MaxRetries + 1}
	if retrying {
		msg = "model server call failed; retrying"
		attrs = append(attrs, "retry_in", next)
	}
	if cerr.RetryAfter > 0 {
		attrs = append(attrs, "retry_after", cerr.RetryAfter)
	}
	if failed > 1 {
		attrs = append(attrs, "failed_attempts", failed, "failing_for", now.Sub(since).Round(time.Millisecond))
	}
	if quiet > 0 {
		attrs = append(attrs, "not_logged", quiet, "warn_interval", b.cfg.WarnInterval)
	}
	attrs = append(attrs, "error", e.Error())
	b.cfg.Logger.Warn(msg, attrs...)
}

// noteAnswer ends a run of failed attempts: the server answered. It logs
// one INFO line when that run was warned about.
func (b *Backend) noteAnswer() {
	o := &b.outage
	if !o.failing.Load() {
		return
	}
	o.mu.Lock()
	if !o.failing.Load() {
		o.mu.Unlock()
		return
	}
	o.failing.Store(false)
	failed, since, warned := o.failed, o.since, o.warned
	o.mu.Unlock()
	if warned {
		b.cfg.Logger.Info("model server answers again", "backend", b.name, "endpoint", b.endpoint,
			"failed_attempts", failed, "failing_for", time.Since(since).Round(time.Millisecond))
	}
}

// logEndpoint is the chat-completions URL of baseURL for log lines,
// without user information, query or fragment.
func logEndpoint(baseURL string) string {
	u, err := url.Parse(baseURL)
	if err != nil {
		return "(unparsable base URL)"
	}
	u.User, u.RawQuery, u.Fragment, u.RawFragment = nil, "", "", ""
	return strings.TrimSuffix(u.String(), "/") + "/chat/completions"
}

// Package faults is spade's reliability suite: its tests kill the spade
// binary with SIGKILL mid-round, put a fault-injecting proxy between spade
// and a real S3 server (versitygw), run rounds against a misbehaving
// OpenAI-compatible server, and feed the CLI bad input, checking each time
// what docs/reliability.md promises: committed data is never lost or
// half-visible, rounds complete through retries, failures land in error
// columns, and bad input gets a clear error and touches nothing.
//
// The package's one non-test piece is Proxy, an HTTP reverse proxy that
// injects storage faults (503s, connection resets before or after the
// upstream saw the request, slow answers, cut-off bodies) and can switch
// upstream while running, so a test can restart the server behind it.
package faults

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Action is what the proxy does with one request.
type Action int

// The actions a Decider can choose. Every fault is one a real S3 endpoint
// or the network between shows: throttling, a load balancer dropping a
// connection, a server that applied a write but whose answer was lost, a
// slow disk, a body cut off mid-transfer.
const (
	// Forward passes the request to the upstream and its answer back.
	Forward Action = iota
	// Unavailable answers 503 with an S3 "SlowDown" error body without
	// forwarding (S3 API reference, "Error responses").
	Unavailable
	// ResetBefore resets the client's TCP connection (RST, SO_LINGER 0)
	// before the upstream sees the request.
	ResetBefore
	// ResetAfter forwards the request, reads the upstream's whole answer,
	// then resets the client's connection instead of answering: the write
	// happened but the client cannot know.
	ResetAfter
	// Slow waits Proxy.Delay, then forwards.
	Slow
	// CutBody forwards, sends the answer's status and headers and the first
	// half of its body, then resets the connection. Answers without a body
	// are forwarded whole.
	CutBody
	numActions
)

// String names the action for test output.
func (a Action) String() string {
	names := [...]string{"forward", "unavailable", "reset_before", "reset_after", "slow", "cut_body"}
	if a >= 0 && int(a) < len(names) {
		return names[a]
	}
	return fmt.Sprintf("action(%d)", int(a))
}

// Decider chooses the action for the n-th request (0-based, in arrival
// order). It runs concurrently and may block, e.g. to restart the upstream
// server before answering; the request waits meanwhile.
type Decider func(r *http.Request, n int) Action

// Proxy is a fault-injecting HTTP reverse proxy on 127.0.0.1. It keeps the
// client's Host header, so AWS SigV4 signatures made for the proxy's
// address verify at the upstream. Methods are safe for concurrent use.
type Proxy struct {
	// URL is the proxy's base URL, "http://127.0.0.1:<port>".
	URL string
	// Delay is the extra latency of the Slow action.
	Delay time.Duration

	decide   Decider
	ln       net.Listener
	srv      *http.Server
	tr       *http.Transport
	upstream atomic.Pointer[url.URL]
	next     atomic.Int64
	counts   [numActions]atomic.Int64
	closed   sync.Once
}

// maxProxyBody bounds a buffered request body (bytes): multipart parts of
// up to 64 MiB.
const maxProxyBody = 64 << 20

// NewProxy starts a proxy in front of upstream (a base URL such as
// "http://127.0.0.1:7070"); decide nil forwards everything. Errors: a bad
// upstream URL, or no loopback port to listen on.
func NewProxy(upstream string, decide Decider) (*Proxy, error) {
	if decide == nil {
		decide = func(*http.Request, int) Action { return Forward }
	}
	p := &Proxy{decide: decide, Delay: 300 * time.Millisecond}
	if err := p.SetUpstream(upstream); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fault proxy: listen on 127.0.0.1: %w", err)
	}
	p.ln = ln
	p.URL = "http://" + ln.Addr().String()
	p.tr = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 32, ResponseHeaderTimeout: 2 * time.Minute}
	p.srv = &http.Server{Handler: http.HandlerFunc(p.serve), ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// SetUpstream points the proxy at another server from the next request on.
// Errors: u is not an absolute http(s) URL.
func (p *Proxy) SetUpstream(u string) error {
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return fmt.Errorf("fault proxy: upstream %q: want http(s)://host:port", u)
	}
	p.upstream.Store(pu)
	p.dropIdle()
	return nil
}

func (p *Proxy) dropIdle() {
	if p.tr != nil {
		p.tr.CloseIdleConnections()
	}
}

// Count returns how many requests got action a so far.
func (p *Proxy) Count(a Action) int {
	if a < 0 || a >= numActions {
		return 0
	}
	return int(p.counts[a].Load())
}

// Requests returns the number of requests the proxy has received.
func (p *Proxy) Requests() int { return int(p.next.Load()) }

// Close stops the proxy, closing every connection. It is idempotent.
func (p *Proxy) Close() {
	p.closed.Do(func() {
		_ = p.srv.Close()
		p.tr.CloseIdleConnections()
	})
}

var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	n := int(p.next.Add(1) - 1)
	body, err := io.ReadAll(io.LimitReader(r.Body, maxProxyBody))
	if err != nil {
		http.Error(w, "fault proxy: read request body: "+err.Error(), http.StatusBadGateway)
		return
	}
	a := p.decide(r, n)
	if a < 0 || a >= numActions {
		a = Forward
	}
	p.counts[a].Add(1)
	switch a {
	case Unavailable:
		w.Header().Set("Content-Type", "application/xml")
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate (injected by the fault proxy).</Message></Error>`)
		return
	case ResetBefore:
		hangUp(w, true)
		return
	case Slow:
		t := time.NewTimer(p.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	resp, err := p.forward(r.Context(), r, body)
	if err != nil {
		// The upstream is down (restarting): what a load balancer says.
		http.Error(w, "fault proxy: upstream: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	payload, err := io.ReadAll(resp.Body)
	if err != nil {
		hangUp(w, true)
		return
	}
	if a == ResetAfter {
		hangUp(w, true)
		return
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	for _, h := range hopHeaders {
		w.Header().Del(h)
	}
	if a == CutBody && len(payload) > 1 && r.Method != http.MethodHead {
		w.Header().Set("Content-Length", fmt.Sprint(len(payload)))
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(payload[:len(payload)/2])
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		hangUp(w, false)
		return
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(payload)
}

func (p *Proxy) forward(ctx context.Context, r *http.Request, body []byte) (*http.Response, error) {
	up := p.upstream.Load()
	target := *up
	target.Path = r.URL.Path
	target.RawPath = r.URL.RawPath
	target.RawQuery = r.URL.RawQuery
	out, err := http.NewRequestWithContext(ctx, r.Method, target.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	out.Header = r.Header.Clone()
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	out.Host = r.Host
	out.ContentLength = int64(len(body))
	if len(body) == 0 && r.ContentLength <= 0 {
		out.Body = http.NoBody
	}
	resp, err := p.tr.RoundTrip(out)
	if err != nil && isConnErr(err) {
		p.dropIdle()
	}
	return resp, err
}

func isConnErr(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) || strings.Contains(err.Error(), "connection")
}

// hangUp hijacks the connection and closes it: with rst, with SO_LINGER 0
// so the client sees "connection reset by peer"; without, with a FIN after
// whatever was already flushed (a body cut short).
func hangUp(w http.ResponseWriter, rst bool) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic("fault proxy: response writer cannot be hijacked")
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok && rst {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

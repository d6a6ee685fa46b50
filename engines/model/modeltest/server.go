// Package modeltest is an OpenAI-compatible chat-completions server on
// 127.0.0.1 for tests and benchmarks. It speaks the real wire format
// (POST /v1/chat/completions with JSON bodies as OpenAI clients send them,
// tool_calls, finish_reason, usage; GET /v1/models), answers through a
// programmable Handler, injects faults by sequence or by share (429 with
// Retry-After, 500, 503, fixed latency, hangs, truncated JSON, empty
// choices, 1 MiB bodies), and records what it received so tests can assert
// on headers and bodies.
//
// Without a Handler it plays both SPADE roles plausibly (see
// DefaultHandler), so whole pipeline rounds can run against it.
package modeltest

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spade-pipeline/spade/engines/model"
)

// DefaultModel is the model name the server reports unless WithModel sets
// another.
const DefaultModel = "modeltest-1"

// maxRequestBody bounds an accepted request body (bytes).
const maxRequestBody = 32 << 20

// HugeBytes is the size of the content a FaultHuge answer carries (1 MiB).
const HugeBytes = 1 << 20

// FaultKind names one injected failure or distortion of an answer.
type FaultKind int

// The fault kinds. Status-code faults answer with an OpenAI-style error
// object; the others distort a normal answer.
const (
	// FaultNone answers normally.
	FaultNone FaultKind = iota
	// FaultRateLimit answers 429 with Fault.RetryAfter as Retry-After.
	FaultRateLimit
	// FaultServerError answers 500.
	FaultServerError
	// FaultUnavailable answers 503 with Fault.RetryAfter as Retry-After.
	FaultUnavailable
	// FaultBadRequest answers 400 with Fault.Message.
	FaultBadRequest
	// FaultSlow answers normally after Fault.Delay more.
	FaultSlow
	// FaultHang never answers; the handler returns when the client gives
	// up (closes the connection) or the server closes.
	FaultHang
	// FaultTruncated sends 200 and the first half of a valid JSON body.
	FaultTruncated
	// FaultEmptyChoices sends a valid completion with "choices": [].
	FaultEmptyChoices
	// FaultHuge answers with HugeBytes of content in every choice.
	FaultHuge
)

// String names the fault kind for test output.
func (k FaultKind) String() string {
	names := [...]string{"none", "rate_limit", "server_error", "unavailable", "bad_request", "slow", "hang", "truncated", "empty_choices", "huge"}
	if int(k) >= 0 && int(k) < len(names) {
		return names[k]
	}
	return fmt.Sprintf("fault(%d)", int(k))
}

// Fault is one injected failure.
type Fault struct {
	// Kind is the failure; FaultNone (the zero value) answers normally.
	Kind FaultKind
	// RetryAfter is sent verbatim as the Retry-After header on 429/503
	// (delta-seconds like "1" or an HTTP-date); empty sends none.
	RetryAfter string
	// Delay is the extra latency of FaultSlow.
	Delay time.Duration
	// Message is the error message of status-code faults.
	Message string
}

// Request is what the server received for one chat-completions call.
type Request struct {
	// Index is the 0-based arrival number among chat-completions calls.
	Index int
	// Model is the model name the client asked for.
	Model string
	// Chat is the body decoded into the model view (Meta is never on the
	// wire, so it is always empty here).
	Chat model.Request
	// Header holds the HTTP request headers (a copy when recording; the
	// live map, valid only during the Handler call, under WithoutRecording).
	Header http.Header
	// Body is the raw JSON body.
	Body []byte
	// Keys are the body's top-level JSON keys, sorted.
	Keys []string
}

// Reply is a Handler's answer. Choices are sent in order as choices[i];
// a zero FinishReason becomes "tool_calls" or "stop". Usage nil derives
// token counts from byte lengths. A non-zero Fault overrides the answer.
type Reply struct {
	// Choices are the answer's samples, sent as choices[i].
	Choices []model.Choice
	// Usage is the reported token usage; nil derives it from byte lengths
	// (about four bytes per token).
	Usage *model.Usage
	// Fault, when its Kind is not FaultNone, is injected instead of the
	// answer.
	Fault Fault
}

// Handler decides the answer to one request. It runs concurrently.
type Handler func(req Request) Reply

// Option configures a Server.
type Option func(*config)

type config struct {
	handler    Handler
	modelName  string
	latency    time.Duration
	sequence   []Fault
	share      float64
	shareFault Fault
	shareSeed  uint64
	apiKey     string
	record     bool
	envSource  string
	hint       string
	behaviour  Behaviour
	addr       string
}

// WithHandler sets the function that answers each request (default:
// DefaultHandler with the configured environment source and hint).
func WithHandler(h Handler) Option { return func(c *config) { c.handler = h } }

// WithModel sets the model name reported in answers and /v1/models.
func WithModel(name string) Option { return func(c *config) { c.modelName = name } }

// WithLatency makes every answer leave d after its request arrived (the
// fixed latency benchmarks use). The server's own work on the request
// (decoding, the Handler, encoding the answer) happens within d, not on
// top of it; only the Go runtime's timer wake-up lag and the network are
// added.
func WithLatency(d time.Duration) Option { return func(c *config) { c.latency = d } }

// WithFaultSequence injects seq[i] into the request with arrival Index i;
// later requests follow WithFaultShare or answer normally.
func WithFaultSequence(seq ...Fault) Option {
	return func(c *config) { c.sequence = append([]Fault(nil), seq...) }
}

// WithFaultShare injects f into a share (0..1) of requests, chosen by a
// hash of (seed, arrival Index) so the same run faults the same requests.
func WithFaultShare(f Fault, share float64, seed uint64) Option {
	return func(c *config) { c.shareFault, c.share, c.shareSeed = f, share, seed }
}

// WithAPIKey makes the server answer 401 unless the request carries
// "Authorization: Bearer <key>".
func WithAPIKey(key string) Option { return func(c *config) { c.apiKey = key } }

// WithoutRecording stops the server from keeping request copies, for
// benchmarks with many calls. Counters still work.
func WithoutRecording() Option { return func(c *config) { c.record = false } }

// WithEnvSource sets the Python environment source the default handler
// returns to designer prompts (default DefaultEnvSource).
func WithEnvSource(src string) Option { return func(c *config) { c.envSource = src } }

// WithHint sets the text the default handler returns to hint prompts.
func WithHint(hint string) Option { return func(c *config) { c.hint = hint } }

// WithAddr makes the server listen on addr ("127.0.0.1:8000") instead of
// a random loopback port, as a server a test's serve_command starts on
// its {port} must.
func WithAddr(addr string) Option { return func(c *config) { c.addr = addr } }

// WithBehaviour makes the server answer the way a real model and server
// do (see Behaviour): the default handler shapes its answers by it, and
// the server-level parts (RejectTools, VLLMErrors) apply whatever the
// handler.
func WithBehaviour(b Behaviour) Option { return func(c *config) { c.behaviour = b } }

// Server is a running test server. Its methods are safe for concurrent use.
type Server struct {
	// URL is the API root to use as a client's base URL,
	// "http://127.0.0.1:<port>/v1".
	URL string

	cfg      config
	ln       net.Listener
	srv      *http.Server
	done     chan struct{}
	closed   sync.Once
	handlers sync.WaitGroup

	mu       sync.Mutex
	received []Request

	next        atomic.Int64
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
	down        atomic.Bool
	refused     atomic.Int64
}

// New starts a server on 127.0.0.1 with a random port (or on WithAddr's
// address). Close it when done. Errors: the listener could not be opened.
func New(opts ...Option) (*Server, error) {
	cfg := config{modelName: DefaultModel, record: true, envSource: DefaultEnvSource, hint: DefaultHint, addr: "127.0.0.1:0"}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.handler == nil {
		cfg.handler = BehavingHandler(cfg.envSource, cfg.hint, cfg.behaviour)
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return nil, fmt.Errorf("modeltest: listen on %s: %w", cfg.addr, err)
	}
	s := &Server{
		URL:  "http://" + ln.Addr().String() + "/v1",
		cfg:  cfg,
		ln:   ln,
		done: make(chan struct{}),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.unlessDown(s.chat))
	mux.HandleFunc("GET /v1/models", s.unlessDown(s.models))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Start is New for tests: it fails tb on error and closes the server in
// tb.Cleanup.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	s, err := New(opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

// Close stops the server, ends hanging handlers and waits for every
// handler to return. It is idempotent.
func (s *Server) Close() {
	s.closed.Do(func() {
		close(s.done)
		_ = s.srv.Close()
		s.handlers.Wait()
	})
}

// Requests returns copies of the chat requests received so far, in
// arrival order (empty under WithoutRecording).
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Request, len(s.received))
	copy(out, s.received)
	return out
}

// Count returns the number of chat requests received.
func (s *Server) Count() int { return int(s.next.Load()) }

// MaxInFlight returns the largest number of chat requests the server was
// handling at the same moment.
func (s *Server) MaxInFlight() int { return int(s.maxInFlight.Load()) }

// SetDown switches the whole server into an outage (true) and out of it
// (false): while down, every request, /v1/models included, is answered
// 503 at once, as a load balancer in front of a dead model server does;
// the handler and fault options are not consulted and nothing is recorded.
func (s *Server) SetDown(down bool) { s.down.Store(down) }

// Refused returns how many requests were answered 503 while down.
func (s *Server) Refused() int { return int(s.refused.Load()) }

func (s *Server) unlessDown(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.down.Load() {
			s.refused.Add(1)
			writeError(w, http.StatusServiceUnavailable, "the server is down (modeltest SetDown)", "server_error", "", "")
			return
		}
		h(w, r)
	}
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","created":0,"owned_by":"modeltest"}]}`, s.cfg.modelName)
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	// The latency runs from here: reading and decoding the request, the
	// Handler and encoding the answer happen inside it, and the answer is
	// written when it ends. A server that slept the full latency after
	// its own work would answer later than configured by its CPU time per
	// call, and more so the busier the machine.
	arrived := time.Now()
	s.handlers.Add(1)
	defer s.handlers.Done()
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxInFlight.Load()
		if n <= m || s.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	idx := s.next.Add(1) - 1

	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, "read body: "+err.Error(), "invalid_request_error", "", "")
		return
	}
	chatReq, modelName, keys, decErr := decodeRequest(body, s.cfg.record)
	req := Request{Index: int(idx), Model: modelName, Chat: chatReq, Header: r.Header, Body: body, Keys: keys}
	if s.cfg.record {
		req.Header = r.Header.Clone()
		s.mu.Lock()
		s.received = append(s.received, req)
		s.mu.Unlock()
	}
	if s.cfg.apiKey != "" && r.Header.Get("Authorization") != "Bearer "+s.cfg.apiKey {
		writeError(w, http.StatusUnauthorized, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key", "")
		return
	}
	if decErr != nil {
		s.writeError(w, http.StatusBadRequest, decErr.Error(), "invalid_request_error", "", "")
		return
	}
	if s.cfg.behaviour.RejectTools && len(chatReq.Tools) > 0 {
		s.writeError(w, http.StatusBadRequest, AutoToolChoiceMessage, "BadRequestError", "", "")
		return
	}

	fault := s.faultFor(int(idx))
	var reply Reply
	if fault.Kind == FaultNone || fault.Kind == FaultSlow || fault.Kind == FaultHuge || fault.Kind == FaultTruncated {
		reply = s.cfg.handler(req)
		if reply.Fault.Kind != FaultNone {
			fault = reply.Fault
		}
	}
	wait := s.cfg.latency
	if fault.Kind == FaultSlow {
		wait += fault.Delay
	}
	if fault.Kind == FaultHang {
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
		return
	}
	a := s.answer(idx, chatReq, fault, reply)
	if !s.sleep(r.Context(), time.Until(arrived.Add(wait))) {
		return
	}
	if a.status != http.StatusOK {
		s.writeError(w, a.status, a.message, a.typ, a.code, a.retryAfter)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(a.body)
}

// answer is a response decided before the latency has passed.
type answer struct {
	status int
	// body is the 200 body (already cut short for FaultTruncated).
	body []byte
	// message, typ, code and retryAfter describe an error answer.
	message, typ, code, retryAfter string
}

// answer encodes the reply to request idx, or the error fault overrides.
func (s *Server) answer(idx int64, chatReq model.Request, fault Fault, reply Reply) answer {
	switch fault.Kind {
	case FaultRateLimit:
		return answer{status: http.StatusTooManyRequests, message: orDefault(fault.Message, "Rate limit reached for requests."), typ: "requests", code: "rate_limit_exceeded", retryAfter: fault.RetryAfter}
	case FaultServerError:
		return answer{status: http.StatusInternalServerError, message: orDefault(fault.Message, "The server had an error while processing your request."), typ: "server_error"}
	case FaultUnavailable:
		return answer{status: http.StatusServiceUnavailable, message: orDefault(fault.Message, "The engine is currently overloaded."), typ: "server_error", retryAfter: fault.RetryAfter}
	case FaultBadRequest:
		return answer{status: http.StatusBadRequest, message: orDefault(fault.Message, "Invalid request."), typ: "invalid_request_error"}
	case FaultEmptyChoices:
		reply.Choices = nil
	case FaultHuge:
		huge := strings.Repeat("x", HugeBytes)
		for i := range reply.Choices {
			reply.Choices[i].Message.Content = huge
		}
	}
	out, err := encodeCompletion(idx, s.cfg.modelName, chatReq, reply.Choices, reply.Usage)
	if err != nil {
		return answer{status: http.StatusInternalServerError, message: "encode: " + err.Error(), typ: "server_error"}
	}
	if fault.Kind == FaultTruncated {
		out = out[:len(out)/2]
	}
	return answer{status: http.StatusOK, body: out}
}

// sleep waits d unless the client or the server goes away first; d <= 0
// returns at once.
func (s *Server) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.done:
		return false
	}
}

func (s *Server) faultFor(idx int) Fault {
	if idx < len(s.cfg.sequence) {
		return s.cfg.sequence[idx]
	}
	if s.cfg.share > 0 && unitHash(s.cfg.shareSeed, uint64(idx)) < s.cfg.share {
		return s.cfg.shareFault
	}
	return Fault{}
}

// unitHash maps (seed, i) to [0, 1) deterministically.
func unitHash(seed, i uint64) float64 {
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], seed)
	binary.LittleEndian.PutUint64(b[8:], i)
	_, _ = h.Write(b[:])
	return float64(h.Sum64()>>11) / float64(1<<53)
}

func writeError(w http.ResponseWriter, status int, message, typ, code, retryAfter string) {
	w.Header().Set("Content-Type", "application/json")
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(status)
	_, _ = w.Write(errorBody(message, typ, code))
}

// AutoToolChoiceMessage is vLLM's answer (HTTP 400) to a request that
// declares tools when the server runs without --enable-auto-tool-choice.
const AutoToolChoiceMessage = `"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`

// writeError writes an error answer in the OpenAI shape, or in vLLM's
// under Behaviour.VLLMErrors.
func (s *Server) writeError(w http.ResponseWriter, status int, message, typ, code, retryAfter string) {
	if !s.cfg.behaviour.VLLMErrors {
		writeError(w, status, message, typ, code, retryAfter)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(status)
	_, _ = w.Write(vllmErrorBody(message, typ, status))
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

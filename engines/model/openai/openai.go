// Package openai is the model.Backend for any OpenAI-compatible
// chat-completions server (OpenAI, vLLM, SGLang, Ollama, llama.cpp), built on
// the official github.com/openai/openai-go/v3 SDK (docs/design.md "Engines the
// stages share").
//
// The SDK's own retry loop is switched off (option.WithMaxRetries(0)); this
// package retries itself so that (1) a concurrency slot is released while a
// call sleeps in backoff, (2) backoff jitter is derived deterministically
// from the request instead of a global random source, (3) the failure of the
// last attempt comes back as a typed *model.CallError with the HTTP status,
// the server's message and the Retry-After it asked for.
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/internal/textcut"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultAPIKeyEnv     = "OPENAI_API_KEY"
	DefaultBaseURL       = "https://api.openai.com/v1"
	DefaultConcurrency   = 16
	DefaultTimeout       = 5 * time.Minute
	DefaultMaxRetries    = 4
	DefaultBackoffBase   = 1 * time.Second
	DefaultBackoffMax    = 30 * time.Second
	DefaultMaxRetryAfter = 2 * time.Minute
	// DefaultMaxResponseBytes bounds a successful response body after
	// decompression: 8 MiB, some 500 times a 4,096-token completion.
	DefaultMaxResponseBytes = 8 << 20
	// DefaultWarnInterval is the least time between two warnings about
	// failed attempts while the server keeps failing.
	DefaultWarnInterval = 30 * time.Second
)

// maxErrorBody bounds how much of an error response body is read (bytes);
// OpenAI-style error bodies are a few hundred bytes.
const maxErrorBody = 64 << 10

// Config configures one Backend. Zero fields take the Default* values.
type Config struct {
	// BaseURL is the server's API root including the version path, e.g.
	// "http://127.0.0.1:8000/v1" for vLLM.
	BaseURL string
	// Model is the model name sent in every request (required).
	Model string
	// APIKeyEnv names the environment variable holding the API key
	// (default OPENAI_API_KEY). An unset or empty variable sends no
	// Authorization header, which local servers accept. The key itself is
	// never stored in Config, tables, errors or logs.
	APIKeyEnv string
	// Concurrency bounds the HTTP requests in flight across all callers of
	// this Backend (default 16).
	Concurrency int
	// Timeout bounds one HTTP attempt, from send to fully read body
	// (default 5 minutes). The caller's ctx bounds the whole call.
	Timeout time.Duration
	// MaxRetries is the number of retries after the first attempt for
	// retryable failures (default 4; negative means no retries).
	MaxRetries int
	// BackoffBase and BackoffMax shape the exponential backoff used when
	// the server gives no Retry-After: attempt k waits a deterministic
	// value in [d/2, d] with d = min(BackoffBase*2^k, BackoffMax).
	// BackoffBase defaults to 1 s.
	BackoffBase time.Duration
	// BackoffMax caps one backoff delay (default 30 s).
	BackoffMax time.Duration
	// MaxRetryAfter caps a server-directed delay: a Retry-After longer than
	// this ends the call with a retryable *model.CallError instead of
	// sleeping (default 2 minutes).
	MaxRetryAfter time.Duration
	// HTTPClient overrides the HTTP client; nil builds one whose connection
	// pool matches Concurrency.
	HTTPClient *http.Client
	// MaxResponseBytes bounds a 2xx response body as decoded (after gzip),
	// in bytes (default DefaultMaxResponseBytes): a server that ignores
	// max_tokens, streams without end or sends a gzip bomb fails the call
	// with model.ErrResponseTooLarge, not retried, instead of exhausting
	// memory.
	MaxResponseBytes int64
	// Logger receives the backend's outage warnings (default
	// slog.Default() when New runs): the first failed attempt of a run
	// of failures (HTTP 408, 429, 5xx, transport errors, attempt timeouts)
	// at WARN with the endpoint, the attempt and the wait before the next
	// one, then at most one such warning per WarnInterval (the interval
	// holds across runs of failures: a run that starts within it of the
	// last warning is not warned about), and one INFO line when the
	// server answers again after a warning. Logs are not data: nothing a
	// call returns depends on them.
	Logger *slog.Logger
	// WarnInterval is the least time between two outage warnings
	// (default DefaultWarnInterval, 30 s).
	WarnInterval time.Duration
	// ExtraBody holds top-level request fields sent as they are with every
	// call, as the OpenAI Python client's extra_body does: vLLM and SGLang
	// extensions such as "chat_template_kwargs" ({"enable_thinking":
	// false} for Qwen3), "top_k", "repetition_penalty". A key the request
	// already carries (temperature, max_tokens, ...) is replaced by its
	// value here. nil sends nothing.
	ExtraBody map[string]any
	// ToolChoice is the tool_choice sent with requests that declare tools:
	// "auto", "required" or "none"; "" sends none, and the server applies
	// its default (vLLM: "auto" when tools are given).
	ToolChoice string
	// CheckModel makes a response whose model is not Model
	// (model.SameServedModel) fail with a *model.CallError wrapping
	// model.ErrStalePolicy, not retried. spade sets it when Model is the
	// round's policy (managed and reload serving, docs/serving.md);
	// off, as for OpenAI's API, which answers "gpt-4o" with a dated name.
	CheckModel bool
	// ReturnTokens asks the server for each sample's token ids and
	// per-token log-probs (docs/models.md "Token ids and log-probs"):
	// requests carry "logprobs": true and the vLLM and SGLang extensions
	// "return_token_ids", "return_prompt_token_ids" and
	// "return_tokens_as_token_ids", and Choice.Tokens holds what came
	// back. A server that ignores the extensions answers as usual and
	// Choice.Tokens is nil. Off for OpenAI's own API, which rejects
	// unknown request fields. A key of ExtraBody replaces the field of
	// the same name.
	ReturnTokens bool
}

// Backend is a model.Backend talking to one OpenAI-compatible server. It is
// safe for concurrent use; one semaphore bounds all its callers together.
type Backend struct {
	cfg  Config
	name string
	// redact removes the API key from text. The key lives only in this
	// closure and the SDK's options, never in a printable field, so even
	// fmt's %#v of a Backend cannot show it.
	redact func(string) string
	client oa.Client
	sem    chan struct{}
	// endpoint is the chat-completions URL as logged: without user
	// information, query or fragment, and with the key redacted.
	endpoint string
	outage   outage
	// tokensRefused is set when the server refused the token fields of
	// Config.ReturnTokens (a 400 or 422 naming them): later calls do not
	// send them.
	tokensRefused atomic.Bool
}

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

// New checks cfg, applies defaults, reads the API key from the environment
// variable cfg.APIKeyEnv and returns a Backend. It does not contact the
// server. Errors: missing Model, negative Concurrency or Timeout.
func New(cfg Config) (*Backend, error) {
	if strings.TrimSpace(cfg.Model) == "" {
		return nil, errors.New("openai backend: config field Model is empty")
	}
	if cfg.Concurrency < 0 || cfg.Timeout < 0 || cfg.BackoffBase < 0 || cfg.BackoffMax < 0 || cfg.MaxRetryAfter < 0 || cfg.WarnInterval < 0 {
		return nil, fmt.Errorf("openai backend %s: Concurrency, Timeout, BackoffBase, BackoffMax, MaxRetryAfter and WarnInterval must not be negative", cfg.Model)
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	if cfg.APIKeyEnv == "" {
		cfg.APIKeyEnv = DefaultAPIKeyEnv
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	switch {
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = DefaultMaxRetries
	case cfg.MaxRetries < 0:
		cfg.MaxRetries = 0
	}
	if cfg.BackoffBase == 0 {
		cfg.BackoffBase = DefaultBackoffBase
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = DefaultBackoffMax
	}
	if cfg.MaxRetryAfter == 0 {
		cfg.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.WarnInterval == 0 {
		cfg.WarnInterval = DefaultWarnInterval
	}
	if cfg.HTTPClient == nil {
		t, ok := http.DefaultTransport.(*http.Transport)
		if ok {
			t = t.Clone()
		} else {
			t = &http.Transport{Proxy: http.ProxyFromEnvironment}
		}
		// The default of 2 idle connections per host would make every call
		// above 2 in flight open a fresh TCP connection.
		t.MaxIdleConnsPerHost = cfg.Concurrency
		t.MaxIdleConns = cfg.Concurrency
		cfg.HTTPClient = &http.Client{Transport: t}
	}
	apiKey := os.Getenv(cfg.APIKeyEnv)
	b := &Backend{
		cfg:  cfg,
		name: "openai:" + cfg.Model,
		redact: func(s string) string {
			if apiKey == "" {
				return s
			}
			return strings.ReplaceAll(s, apiKey, "[REDACTED]")
		},
		sem: make(chan struct{}, cfg.Concurrency),
	}
	b.endpoint = b.redact(logEndpoint(cfg.BaseURL))
	// WithAPIKey after the SDK's environment defaults overrides an ambient
	// OPENAI_API_KEY, so APIKeyEnv alone decides which key is sent.
	b.client = oa.NewClient(
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(apiKey),
		option.WithHTTPClient(cfg.HTTPClient),
		option.WithMaxRetries(0),
	)
	return b, nil
}

// InFlight returns the HTTP requests in flight now (at most
// Config.Concurrency): attempts holding a concurrency slot, not calls
// waiting for one or sleeping in backoff. For progress displays.
func (b *Backend) InFlight() int { return len(b.sem) }

// Close releases idle HTTP connections. Calls may still be made after
// Close; they open new connections.
func (b *Backend) Close() { b.cfg.HTTPClient.CloseIdleConnections() }

// Name returns "openai:<model>".
func (b *Backend) Name() string { return b.name }

// Chat sends req as one chat-completions call, retrying retryable failures
// (HTTP 408, 429, 5xx, transport errors, attempt timeouts, truncated
// bodies) up to MaxRetries times. A Retry-After (or retry-after-ms) header
// on the failed attempt sets the wait; otherwise the deterministic
// exponential backoff of Config applies. Request.Meta is never sent.
// Errors: *model.CallError for every failure after the request was built
// (errors.Is works for model.ErrEmptyResponse, model.ErrMalformedResponse,
// model.ErrTimeout and the caller's ctx.Err()); an error wrapping
// model.ErrBadRequest when req cannot be expressed on the wire.
func (b *Backend) Chat(ctx context.Context, req model.Request) (model.Response, error) {
	params, err := b.params(req)
	if err != nil {
		return model.Response{}, err
	}
	jitterSeed := requestSeed(b.cfg.Model, req)
	for attempt := 0; ; attempt++ {
		resp, cerr := b.attempt(ctx, params, req.Tools)
		if cerr != nil && b.askTokens() && refusesTokenFields(cerr) {
			// The server does not take the token extensions (transformers
			// serve answers 422 "Unexpected fields"): stop asking, and ask
			// again without them; the samples are trained from their text.
			if !b.tokensRefused.Swap(true) {
				b.cfg.Logger.Warn("model server refused the token-id request fields; calls go on without them and training falls back to the text of the replies",
					"backend", b.name, "endpoint", b.endpoint, "status", cerr.Status, "error", cerr.Message)
			}
			if params, err = b.params(req); err != nil {
				return model.Response{}, err
			}
			attempt--
			continue
		}
		if cerr == nil {
			b.noteAnswer()
			if b.cfg.CheckModel && !model.SameServedModel(resp.Model, b.cfg.Model) {
				// Another model answered (a server still on the previous
				// checkpoint, or serving something else): not retried, the
				// same server answers the same way again.
				return model.Response{}, &model.CallError{Backend: b.name, Status: http.StatusOK, Attempts: attempt + 1,
					Message: fmt.Sprintf("the server answered as model %q, not the round's policy %q", b.redact(resp.Model), b.cfg.Model), Err: model.ErrStalePolicy}
			}
			return resp, nil
		}
		cerr.Backend = b.name
		cerr.Attempts = attempt + 1
		if ctx.Err() != nil {
			cerr.Err, cerr.Retryable = ctx.Err(), false
			return model.Response{}, cerr
		}
		if !cerr.Retryable {
			if cerr.Status != 0 {
				b.noteAnswer() // an answer, if not the one wanted
			}
			return model.Response{}, cerr
		}
		if attempt >= b.cfg.MaxRetries {
			b.noteFailure(cerr, attempt, false, 0)
			return model.Response{}, cerr
		}
		delay := backoff(b.cfg.BackoffBase, b.cfg.BackoffMax, attempt, jitterSeed)
		if cerr.RetryAfter > 0 {
			if cerr.RetryAfter > b.cfg.MaxRetryAfter {
				b.noteFailure(cerr, attempt, false, 0)
				return model.Response{}, cerr
			}
			delay = cerr.RetryAfter
		}
		b.noteFailure(cerr, attempt, true, delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			cerr.Err, cerr.Retryable = ctx.Err(), false
			return model.Response{}, cerr
		case <-t.C:
		}
	}
}

// tokenFields are the request fields that ask vLLM and SGLang for token
// ids: vLLM's return_token_ids (prompt_token_ids at the top level,
// token_ids per choice; vLLM >= 0.10.2) and return_tokens_as_token_ids
// (logprobs tokens written "token_id:N", older vLLM), SGLang's
// return_token_ids and return_prompt_token_ids (both per choice).
var tokenFields = map[string]any{
	"return_token_ids":           true,
	"return_prompt_token_ids":    true,
	"return_tokens_as_token_ids": true,
}

// params is req on the wire: toParams, then tool_choice, the token
// fields while askTokens holds, and Config.ExtraBody. Errors wrap
// model.ErrBadRequest, prefixed with the backend's name.
func (b *Backend) params(req model.Request) (oa.ChatCompletionNewParams, error) {
	params, err := toParams(b.cfg.Model, req)
	if err != nil {
		return params, fmt.Errorf("%s: %w", b.name, err)
	}
	if b.cfg.ToolChoice != "" && len(req.Tools) > 0 {
		params.ToolChoice = oa.ChatCompletionToolChoiceOptionUnionParam{OfAuto: param.NewOpt(b.cfg.ToolChoice)}
	}
	if b.askTokens() {
		params.Logprobs = oa.Bool(true)
	}
	if extra := b.extraFields(); len(extra) > 0 {
		params.SetExtraFields(extra)
	}
	return params, nil
}

// askTokens reports whether requests ask for token ids now:
// Config.ReturnTokens, unless the server refused the fields.
func (b *Backend) askTokens() bool { return b.cfg.ReturnTokens && !b.tokensRefused.Load() }

// TokensRefused reports whether the server refused the token fields of
// Config.ReturnTokens, so that calls no longer ask for token ids.
func (b *Backend) TokensRefused() bool { return b.tokensRefused.Load() }

// refusesTokenFields reports whether a failed attempt is a server's
// refusal of the token fields: HTTP 400 or 422 whose message names one of
// them or logprobs (vLLM and OpenAI answer 400 to unknown or unsupported
// parameters, FastAPI-based servers 422).
func refusesTokenFields(cerr *model.CallError) bool {
	if cerr.Status != http.StatusBadRequest && cerr.Status != http.StatusUnprocessableEntity {
		return false
	}
	m := strings.ToLower(cerr.Message)
	for k := range tokenFields {
		if strings.Contains(m, k) {
			return true
		}
	}
	return strings.Contains(m, "logprobs")
}

// extraFields is the request's extra top-level fields: tokenFields while
// askTokens holds, then Config.ExtraBody over them.
func (b *Backend) extraFields() map[string]any {
	if !b.askTokens() {
		return b.cfg.ExtraBody
	}
	out := make(map[string]any, len(tokenFields)+len(b.cfg.ExtraBody))
	for k, v := range tokenFields {
		out[k] = v
	}
	for k, v := range b.cfg.ExtraBody {
		out[k] = v
	}
	return out
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

// ProbeTimeout bounds Probe, wall clock.
const ProbeTimeout = 10 * time.Second

// Probe asks whether the server answers at all: one GET /v1/models (no
// retries, ProbeTimeout at most, the same client, key and base URL as
// Chat). nil when an answer came back that is not a server-side failure
// (2xx, or a 4xx other than 408 and 429: a server without that route still
// answers); otherwise an error naming the status or the transport failure.
// engine.StageModel calls it when a stage part ends on failed calls, to
// tell an outage from a few flaky calls.
func (b *Backend) Probe(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, min(b.cfg.Timeout, ProbeTimeout))
	defer cancel()
	_, err := b.client.Models.List(pctx, option.WithMaxRetries(0))
	if err == nil {
		return nil
	}
	var apiErr *oa.Error
	if errors.As(err, &apiErr) {
		st := apiErr.StatusCode
		if st < 500 && st != http.StatusRequestTimeout && st != http.StatusTooManyRequests {
			return nil
		}
		return fmt.Errorf("%s: probe GET /models: HTTP %d", b.name, st)
	}
	return fmt.Errorf("%s: probe GET /models: %s", b.name, b.redact(stableText(err)))
}

// PreflightTimeout bounds Preflight, wall clock.
const PreflightTimeout = 5 * time.Second

// Preflight is the check at the start of a stage that calls the model:
// one GET /v1/models within PreflightTimeout (no retries), so that a
// server that is down fails the stage in seconds, not through every
// call's retries. nil when the server answers (as Probe: a 4xx other
// than 408 and 429 is an answer); otherwise an error wrapping
// model.ErrUnavailable that names the base URL.
func (b *Backend) Preflight(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, PreflightTimeout)
	defer cancel()
	err := b.Probe(pctx)
	if err == nil || ctx.Err() != nil {
		return err
	}
	return fmt.Errorf("%w: model.base_url %s does not answer: %w", model.ErrUnavailable, strings.TrimSuffix(b.redact(logEndpoint(b.cfg.BaseURL)), "/chat/completions"), err)
}

// capture is what the per-attempt middleware saw of the HTTP response,
// read before the SDK turns it into its own error type.
type capture struct {
	status   int
	header   http.Header
	body     []byte
	tooLarge bool // the 2xx body passed Config.MaxResponseBytes
}

// errBodyTooLarge ends the read of a 2xx body past Config.MaxResponseBytes.
var errBodyTooLarge = errors.New("response body too large")

// cappedBody reads at most left bytes of r, then fails with
// errBodyTooLarge (and sets *flag): the SDK then fails to decode.
type cappedBody struct {
	r    io.ReadCloser
	left int64
	flag *bool
}

func (c *cappedBody) Read(p []byte) (int, error) {
	if c.left <= 0 {
		*c.flag = true
		return 0, errBodyTooLarge
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

func (c *cappedBody) Close() error { return c.r.Close() }

// attempt makes one HTTP request while holding a concurrency slot.
func (b *Backend) attempt(ctx context.Context, params oa.ChatCompletionNewParams, tools []model.Tool) (model.Response, *model.CallError) {
	select {
	case b.sem <- struct{}{}:
	case <-ctx.Done():
		return model.Response{}, &model.CallError{Err: ctx.Err()}
	}
	defer func() { <-b.sem }()

	actx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	var c capture
	mw := option.WithMiddleware(func(r *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		inMemoryBody(r)
		res, err := next(r)
		if res == nil {
			return res, err
		}
		c.status, c.header = res.StatusCode, res.Header
		if res.StatusCode >= 400 && res.Body != nil {
			body, _ := io.ReadAll(io.LimitReader(res.Body, maxErrorBody))
			_ = res.Body.Close()
			c.body = body
			res.Body = io.NopCloser(bytes.NewReader(body))
		} else if res.Body != nil {
			// One more byte than allowed tells "exactly the cap" from "over".
			res.Body = &cappedBody{r: res.Body, left: b.cfg.MaxResponseBytes + 1, flag: &c.tooLarge}
		}
		return res, err
	})
	comp, err := b.client.Chat.Completions.New(actx, params, mw)
	if err != nil {
		return model.Response{}, b.classify(ctx, actx, c, err)
	}
	if comp == nil || len(comp.Choices) == 0 {
		e := &model.CallError{Status: c.status, Err: model.ErrEmptyResponse}
		if comp != nil {
			// Some gateways answer 200 with an OpenAI error object and no
			// choices: keep its message, which "no choices" alone loses.
			e.Message = b.redact(strings.ToValidUTF8(errorObjectMessage([]byte(comp.RawJSON())), "\uFFFD"))
		}
		return model.Response{}, e
	}
	if err := checkShape(comp); err != nil {
		return model.Response{}, &model.CallError{Status: c.status, Retryable: true,
			Err: fmt.Errorf("%w: %s", model.ErrMalformedResponse, b.redact(strings.ToValidUTF8(err.Error(), "\uFFFD")))}
	}
	return fromCompletion(comp, tools), nil
}

// checkShape refuses what the SDK's lenient decoding lets through: a
// choice that is null or has no message object (it would read as an
// empty answer and be played, or stored as a hint, with no error), a
// message content that is not a JSON string or null (a number would
// become the text "12345" and be played as an action), a tool_calls that
// is not a list (the SDK drops it and the content is played instead), and
// a tool call whose name, the one fromCompletion reads for its type
// (custom.name for a custom call, function.name otherwise), is missing,
// empty or not a JSON string (a number would become the name "123").
func checkShape(c *oa.ChatCompletion) error {
	for _, ch := range c.Choices {
		if raw := strings.TrimSpace(ch.RawJSON()); !strings.HasPrefix(raw, "{") {
			return fmt.Errorf("choice is not an object: %.60s", raw)
		}
		if raw := strings.TrimSpace(ch.JSON.Message.Raw()); !strings.HasPrefix(raw, "{") {
			return fmt.Errorf("choice %d: no message object (message: %.60q)", ch.Index, raw)
		}
		raw := strings.TrimSpace(ch.Message.JSON.Content.Raw())
		if raw != "" && raw != "null" && !strings.HasPrefix(raw, `"`) {
			return fmt.Errorf("choice %d: message content is not a string: %.60s", ch.Index, raw)
		}
		if raw := strings.TrimSpace(ch.Message.JSON.ToolCalls.Raw()); raw != "" && raw != "null" && !strings.HasPrefix(raw, "[") {
			return fmt.Errorf("choice %d: tool_calls is not a list: %.60s", ch.Index, raw)
		}
		for i, tc := range ch.Message.ToolCalls {
			name, rawName := tc.Function.Name, tc.Function.JSON.Name.Raw()
			if tc.Type == "custom" {
				name, rawName = tc.Custom.Name, tc.Custom.JSON.Name.Raw()
			}
			if name == "" || !strings.HasPrefix(strings.TrimSpace(rawName), `"`) {
				return fmt.Errorf("choice %d: tool call %d has no function name (a non-empty string)", ch.Index, i)
			}
		}
	}
	return nil
}

// inMemoryBody gives r a body net/http recognises as in memory, so that
// headers and body leave in one write. The SDK wraps the serialized JSON
// (a bytes.Reader behind GetBody) in its own close-once ReadCloser, which
// net/http cannot see through: it then flushes the headers before copying
// the body: two write(2) calls and two TCP segments per request (one
// write saved is ~4% of the client's CPU per call on loopback). GetBody
// returns the same bytes in a reader net/http does recognise
// (io.NopCloser of *bytes.Reader); the wrapped body is closed, as the
// transport would have closed it. Requests without GetBody (none from
// this package) are left alone.
func inMemoryBody(r *http.Request) {
	if r.GetBody == nil || r.Body == nil || r.Body == http.NoBody || r.ContentLength <= 0 {
		return
	}
	body, err := r.GetBody()
	if err != nil {
		return
	}
	_ = r.Body.Close()
	r.Body = body
}

// classify turns a failed attempt into a CallError with a retry verdict.
func (b *Backend) classify(ctx, actx context.Context, c capture, err error) *model.CallError {
	switch {
	case ctx.Err() != nil:
		return &model.CallError{Err: ctx.Err()}
	case c.status >= 400:
		e := &model.CallError{
			Status:     c.status,
			Retryable:  c.status == http.StatusRequestTimeout || c.status == http.StatusTooManyRequests || c.status >= 500,
			RetryAfter: retryAfter(c.header, time.Now()),
			Message:    b.redact(strings.ToValidUTF8(errorMessage(c.body), "\uFFFD")),
		}
		if c.status == http.StatusBadRequest && needsAutoToolChoice(e.Message) {
			e.Message += " (" + AutoToolChoiceAdvice + ")"
		}
		return e
	case c.tooLarge:
		// Not retried: a server that ignores max_tokens does so again.
		return &model.CallError{Status: c.status,
			Err: fmt.Errorf("%w: over %d bytes", model.ErrResponseTooLarge, b.cfg.MaxResponseBytes)}
	case actx.Err() != nil:
		return &model.CallError{Status: c.status, Retryable: true,
			Err: fmt.Errorf("%w after %s", model.ErrTimeout, b.cfg.Timeout)}
	case c.status != 0:
		// A 2xx whose body did not decode: truncated or not JSON.
		return &model.CallError{Status: c.status, Retryable: true,
			Err: fmt.Errorf("%w: %s", model.ErrMalformedResponse, b.redact(stableText(err)))}
	default:
		return &model.CallError{Retryable: transientTransport(err), Err: fmt.Errorf("transport: %s", b.redact(stableText(err)))}
	}
}

// localAddrRe matches the local end of a connection in a net error
// ("read tcp 127.0.0.1:44948->127.0.0.1:8000: ..."): an ephemeral port.
var localAddrRe = regexp.MustCompile(`\S+:\d+->`)

// stableText is err's text without the local address of the connection
// and as valid UTF-8: error texts are stored in tables, and the same
// failure must give the same bytes on a rerun (docs/determinism.md).
func stableText(err error) string {
	return strings.ToValidUTF8(localAddrRe.ReplaceAllString(err.Error(), ""), "\uFFFD")
}

// transientTransport tells network failures worth retrying (refused or
// reset connections, a server closing mid-response, network timeouts) from
// configuration errors (bad URL, TLS verification) that will not heal.
func transientTransport(err error) bool {
	var op *net.OpError
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.As(err, &op) || (errors.As(err, &ne) && ne.Timeout())
}

// AutoToolChoiceAdvice is what the error of a call rejected because the
// server cannot choose tools on its own says to do about it. vLLM answers
// HTTP 400 '"auto" tool choice requires --enable-auto-tool-choice and
// --tool-call-parser to be set' to every request that declares tools
// unless it was started with both flags.
const AutoToolChoiceAdvice = "the server must be started with --enable-auto-tool-choice and a --tool-call-parser (hermes for Qwen2.5 and Qwen3), or the plays cannot call tools"

// needsAutoToolChoice reports whether a 400's message is vLLM's refusal of
// tool requests without --enable-auto-tool-choice.
func needsAutoToolChoice(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "enable-auto-tool-choice") || (strings.Contains(m, "auto") && strings.Contains(m, "tool choice") && strings.Contains(m, "requires"))
}

// errorMessage extracts the message of an error body: error.message of
// the OpenAI shape ({"error": {"message": ...}}), the top-level message
// of vLLM's ErrorResponse ({"object": "error", "message": ..., "type":
// ..., "code": 400}) and FastAPI's detail, or a one-line excerpt of any
// other body.
func errorMessage(body []byte) string {
	var e struct {
		Error   json.RawMessage `json:"error"`
		Object  string          `json:"object"`
		Message string          `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	}
	if json.Unmarshal(body, &e) == nil && e.Object == "error" && strings.TrimSpace(e.Message) != "" {
		return e.Message
	}
	var detail string
	if e.Detail != nil && json.Unmarshal(e.Detail, &detail) == nil && strings.TrimSpace(detail) != "" {
		return detail
	}
	if len(e.Error) > 0 {
		var obj struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(e.Error, &obj) == nil && obj.Message != "" {
			return obj.Message
		}
		var s string
		if json.Unmarshal(e.Error, &s) == nil && s != "" {
			return s
		}
	}
	s := strings.Join(strings.Fields(string(body)), " ")
	if len(s) > 200 {
		s = textcut.Prefix(s, 200) + "..."
	}
	return s
}

// errorObjectMessage is errorMessage of a body that holds an "error"
// member, or "" for any other body.
func errorObjectMessage(body []byte) string {
	var e struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(body, &e) != nil || len(e.Error) == 0 || string(e.Error) == "null" {
		return ""
	}
	return errorMessage(body)
}

// retryAfter reads the server-directed delay: retry-after-ms (OpenAI's
// millisecond extension) first, then Retry-After as delta-seconds or an
// HTTP-date (RFC 9110 section 10.2.3). Zero when absent or unparsable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := strings.TrimSpace(h.Get("retry-after-ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && !math.IsInf(ms, 0) && ms < 1e12 {
			return time.Duration(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s <= 0 || math.IsNaN(s) || s > 1e9 {
			return 0
		}
		return time.Duration(s * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// backoff is the wait before retry attempt+1 when the server names none:
// d = min(base*2^attempt, max), then a value in [d/2, d] chosen by a hash
// of the request and attempt, so identical runs wait identically while
// different requests spread out instead of retrying in lockstep.
func backoff(base, maxD time.Duration, attempt int, seed uint64) time.Duration {
	d := base
	for i := 0; i < attempt && d < maxD; i++ {
		d *= 2
	}
	if d > maxD {
		d = maxD
	}
	x := splitmix64(seed + uint64(attempt)*0x9e3779b97f4a7c15)
	frac := float64(x>>11) / float64(1<<53)
	return d/2 + time.Duration(frac*float64(d/2))
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// requestSeed hashes the parts of a request that identify it, for jitter.
func requestSeed(modelName string, req model.Request) uint64 {
	h := fnv.New64a()
	_, _ = io.WriteString(h, modelName)
	for _, m := range req.Messages {
		_, _ = io.WriteString(h, m.Role)
		_, _ = io.WriteString(h, m.Content)
	}
	_, _ = fmt.Fprintf(h, "|%d|%d", req.Seed, req.N)
	return h.Sum64()
}

// toParams maps a model.Request onto the SDK's wire parameters. Meta is
// deliberately not mapped.
func toParams(modelName string, req model.Request) (oa.ChatCompletionNewParams, error) {
	if len(req.Messages) == 0 {
		return oa.ChatCompletionNewParams{}, fmt.Errorf("%w: no messages", model.ErrBadRequest)
	}
	if req.N < 0 || req.MaxTokens < 0 {
		return oa.ChatCompletionNewParams{}, fmt.Errorf("%w: negative n (%d) or max_tokens (%d)", model.ErrBadRequest, req.N, req.MaxTokens)
	}
	p := oa.ChatCompletionNewParams{
		Model:       shared.ChatModel(modelName),
		Temperature: oa.Float(req.Temperature),
		Seed:        oa.Int(req.Seed),
	}
	for i, m := range req.Messages {
		u, err := toMessage(m)
		if err != nil {
			return oa.ChatCompletionNewParams{}, fmt.Errorf("%w: message %d: %w", model.ErrBadRequest, i, err)
		}
		p.Messages = append(p.Messages, u)
	}
	for i, t := range req.Tools {
		if t.Name == "" {
			return oa.ChatCompletionNewParams{}, fmt.Errorf("%w: tool %d: empty name", model.ErrBadRequest, i)
		}
		fd := shared.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			fd.Description = oa.String(t.Description)
		}
		if strings.TrimSpace(t.Parameters) != "" {
			// Plain float64 numbers: the SDK's encoder writes json.Number
			// as a string, which would corrupt "minimum": 1.
			var schema map[string]any
			if err := json.Unmarshal([]byte(t.Parameters), &schema); err != nil || schema == nil {
				return oa.ChatCompletionNewParams{}, fmt.Errorf("%w: tool %d (%s): field parameters is not a JSON object", model.ErrBadRequest, i, t.Name)
			}
			fd.Parameters = shared.FunctionParameters(schema)
		}
		p.Tools = append(p.Tools, oa.ChatCompletionFunctionTool(fd))
	}
	if req.N > 1 {
		p.N = oa.Int(int64(req.N))
	}
	if req.TopP > 0 {
		p.TopP = oa.Float(req.TopP)
	}
	if req.MaxTokens > 0 {
		p.MaxTokens = oa.Int(int64(req.MaxTokens))
	}
	if len(req.Stop) > 0 {
		p.Stop = oa.ChatCompletionNewParamsStopUnion{OfStringArray: req.Stop}
	}
	return p, nil
}

func toMessage(m model.Message) (oa.ChatCompletionMessageParamUnion, error) {
	switch m.Role {
	case model.RoleSystem:
		return oa.SystemMessage(m.Content), nil
	case model.RoleUser:
		return oa.UserMessage(m.Content), nil
	case model.RoleTool:
		if m.ToolCallID == "" {
			return oa.ChatCompletionMessageParamUnion{}, errors.New("tool message without tool_call_id")
		}
		return oa.ToolMessage(m.Content, m.ToolCallID), nil
	case model.RoleAssistant:
		var a oa.ChatCompletionAssistantMessageParam
		if m.Content != "" || len(m.ToolCalls) == 0 {
			a.Content.OfString = param.NewOpt(m.Content)
		}
		for _, tc := range m.ToolCalls {
			a.ToolCalls = append(a.ToolCalls, oa.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &oa.ChatCompletionMessageFunctionToolCallParam{
					ID: tc.ID,
					Function: oa.ChatCompletionMessageFunctionToolCallFunctionParam{
						Name:      tc.Name,
						Arguments: tc.Arguments,
					},
				},
			})
		}
		return oa.ChatCompletionMessageParamUnion{OfAssistant: &a}, nil
	default:
		return oa.ChatCompletionMessageParamUnion{}, fmt.Errorf("unknown role %q", m.Role)
	}
}

// fromCompletion maps the SDK's response onto model.Response, choices in
// index order. Message.Reasoning is the message's "reasoning_content"
// (vLLM and SGLang reasoning parsers), else its "reasoning" (newer vLLM,
// OpenRouter, Ollama). When the request declared tools and a message
// carries no tool_calls, the calls the model wrote as text are read from
// its content (model.ParseToolCallText: Hermes <tool_call> blocks, or a
// bare JSON call of a declared tool) and a finish_reason "stop" becomes
// "tool_calls", as a server running a tool parser answers; the content
// stays as the model wrote it (the caller drops the call text from what
// it sends back: model.ParseToolCallText's rest).
func fromCompletion(c *oa.ChatCompletion, tools []model.Tool) model.Response {
	choices := append([]oa.ChatCompletionChoice(nil), c.Choices...)
	sort.SliceStable(choices, func(i, j int) bool { return choices[i].Index < choices[j].Index })
	// Text from the server reaches Parquet, which needs valid UTF-8
	// (DuckDB refuses to read a file with an invalid string).
	valid := func(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }
	out := model.Response{
		Model: valid(c.Model),
		Usage: model.Usage{
			PromptTokens:     tokenCount(c.Usage.PromptTokens),
			CompletionTokens: tokenCount(c.Usage.CompletionTokens),
		},
		Choices: make([]model.Choice, 0, len(choices)),
	}
	for _, ch := range choices {
		msg := model.Message{Role: model.RoleAssistant, Content: valid(ch.Message.Content), Reasoning: valid(reasoningField(ch.Message.RawJSON()))}
		for _, tc := range ch.Message.ToolCalls {
			call := model.ToolCall{ID: valid(tc.ID), Name: valid(tc.Function.Name), Arguments: valid(tc.Function.Arguments)}
			if tc.Type == "custom" {
				call.Name, call.Arguments = valid(tc.Custom.Name), valid(tc.Custom.Input)
			}
			msg.ToolCalls = append(msg.ToolCalls, call)
		}
		finish := valid(ch.FinishReason)
		if len(tools) > 0 && len(msg.ToolCalls) == 0 {
			if calls, _, ok := model.ParseToolCallText(msg.Content, tools); ok {
				msg.ToolCalls = calls
				if finish == "stop" {
					finish = "tool_calls"
				}
			}
		}
		out.Choices = append(out.Choices, model.Choice{Message: msg, FinishReason: finish, Tokens: choiceTokens(c.RawJSON(), ch.RawJSON())})
	}
	return out
}

// maxTokenID bounds a token id a server reports: vocabularies are below
// 2^24 entries; a larger or negative id is the server's error.
const maxTokenID = 1 << 31

// choiceTokens reads the token information of one choice from the raw
// JSON of the response (top) and of the choice (raw): prompt ids from the
// choice's prompt_token_ids (SGLang), else the response's (vLLM);
// completion ids from the choice's token_ids, else from its
// logprobs.content tokens when all are written "token_id:N" (vLLM's
// return_tokens_as_token_ids); log-probs from logprobs.content. A field
// that does not decode, or holds an id outside [0, 2^31) or a log-prob
// that is positive beyond rounding, is dropped on its own: token
// information is optional, and a sample without it is trained from its
// text. nil when nothing usable was sent.
func choiceTokens(top, raw string) *model.Tokens {
	var ch struct {
		PromptTokenIDs json.RawMessage `json:"prompt_token_ids"`
		TokenIDs       json.RawMessage `json:"token_ids"`
		Logprobs       struct {
			Content []struct {
				Token   string   `json:"token"`
				Logprob *float64 `json:"logprob"`
			} `json:"content"`
		} `json:"logprobs"`
	}
	var resp struct {
		PromptTokenIDs json.RawMessage `json:"prompt_token_ids"`
	}
	if json.Unmarshal([]byte(raw), &ch) != nil {
		return nil
	}
	_ = json.Unmarshal([]byte(top), &resp)
	var t model.Tokens
	t.PromptIDs = tokenIDs(ch.PromptTokenIDs)
	if t.PromptIDs == nil {
		t.PromptIDs = tokenIDs(resp.PromptTokenIDs)
	}
	t.CompletionIDs = tokenIDs(ch.TokenIDs)
	if content := ch.Logprobs.Content; len(content) > 0 {
		lps := make([]float64, 0, len(content))
		for _, c := range content {
			if c.Logprob == nil || *c.Logprob > 1e-6 || math.IsNaN(*c.Logprob) {
				lps = nil
				break
			}
			lps = append(lps, min(*c.Logprob, 0))
		}
		t.Logprobs = lps
		if t.CompletionIDs == nil {
			ids := make([]int64, 0, len(content))
			for _, c := range content {
				n, err := strconv.ParseInt(strings.TrimPrefix(c.Token, "token_id:"), 10, 64)
				if !strings.HasPrefix(c.Token, "token_id:") || err != nil || n < 0 || n >= maxTokenID {
					ids = nil
					break
				}
				ids = append(ids, n)
			}
			t.CompletionIDs = ids
		}
	}
	if t.PromptIDs == nil && t.CompletionIDs == nil && t.Logprobs == nil {
		return nil
	}
	return &t
}

// tokenIDs decodes a JSON list of token ids; nil when raw is absent, null,
// empty, not a list of integers, or holds an id outside [0, 2^31).
func tokenIDs(raw json.RawMessage) []int64 {
	if len(raw) == 0 {
		return nil
	}
	var ids []int64
	if json.Unmarshal(raw, &ids) != nil || len(ids) == 0 {
		return nil
	}
	for _, id := range ids {
		if id < 0 || id >= maxTokenID {
			return nil
		}
	}
	return ids
}

// reasoningField reads the reasoning text of a raw message object:
// "reasoning_content", else "reasoning"; "" when neither is a string.
func reasoningField(raw string) string {
	var m struct {
		ReasoningContent *string `json:"reasoning_content"`
		Reasoning        *string `json:"reasoning"`
	}
	if raw == "" || json.Unmarshal([]byte(raw), &m) != nil {
		return ""
	}
	if m.ReasoningContent != nil && *m.ReasoningContent != "" {
		return *m.ReasoningContent
	}
	if m.Reasoning != nil {
		return *m.Reasoning
	}
	return ""
}

// tokenCount keeps a server's usage count within [0, 10^12] tokens: a
// negative or absurd count is the server's error, not a measurement.
func tokenCount(n int64) int {
	return int(min(max(n, 0), 1_000_000_000_000))
}

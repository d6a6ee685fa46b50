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
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/spade-pipeline/spade/engines/model"
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
	params, asked, err := b.params(req)
	if err != nil {
		return model.Response{}, err
	}
	jitterSeed := requestSeed(b.cfg.Model, req)
	for attempt := 0; ; attempt++ {
		resp, cerr := b.attempt(ctx, params, req.Tools)
		if cerr != nil && asked && refusesTokenFields(cerr) {
			// The server does not take the token extensions (transformers
			// serve answers 422 "Unexpected fields"): stop asking, and ask
			// again without them; the samples are trained from their text.
			// asked is this request's own: a call sent with the fields
			// while another call learnt of the refusal retries too.
			if !b.tokensRefused.Swap(true) {
				b.cfg.Logger.Warn("model server refused the token-id request fields; calls go on without them and training falls back to the text of the replies",
					"backend", b.name, "endpoint", b.endpoint, "status", cerr.Status, "error", cerr.Message)
			}
			if params, asked, err = b.params(req); err != nil {
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

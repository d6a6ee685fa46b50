package model

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Sentinel errors that callers branch on. Backends wrap them (errors.Is
// works through *CallError too).
var (
	// ErrEmptyResponse means the server answered 200 but with no choices, so
	// no sample can be returned (Backend contract: never an empty Response).
	ErrEmptyResponse = errors.New("model: response has no choices")
	// ErrMalformedResponse means the server's body could not be decoded as a
	// chat completion (truncated or invalid JSON, wrong content type).
	ErrMalformedResponse = errors.New("model: malformed response")
	// ErrBadRequest means the Request itself is unusable (unknown role,
	// tool parameters that are not a JSON object) and was never sent.
	ErrBadRequest = errors.New("model: bad request")
	// ErrTimeout means one attempt ran past the backend's per-request
	// timeout (distinct from the caller's ctx deadline, which surfaces as
	// context.DeadlineExceeded).
	ErrTimeout = errors.New("model: request attempt timed out")
	// ErrResponseTooLarge means a successful response body passed the
	// backend's size limit (openai.Config.MaxResponseBytes), counted after
	// decompression; not retried.
	ErrResponseTooLarge = errors.New("model: response too large")
	// ErrUnavailable means the model server is taken to be down: the calls
	// of a stage part failed one after another with transient errors that
	// outlived their retries, or the part ended on such failures and the
	// server did not answer a probe (engine.StageModel). The stage fails
	// and commits nothing, so the round can be run again once the server
	// answers; failed calls followed by answers are recorded on their rows
	// instead.
	ErrUnavailable = errors.New("model: server unavailable")
	// ErrStalePolicy means a server answered with another model than the
	// round's policy it was asked for (the response's model is not the
	// served model name, SameServedModel): the answer is not used and the
	// call fails on its row (docs/design.md "The policy of a round").
	ErrStalePolicy = errors.New("model: stale policy")
)

// SameServedModel reports whether got, the model a response names, is the
// served model name want: equal, or want followed by "@" and a revision,
// as transformers serve reports a model it was given by path
// ("<path>@main"). vLLM and SGLang report --served-model-name as it is.
func SameServedModel(got, want string) bool {
	return got == want || strings.HasPrefix(got, want+"@") && !strings.Contains(got[len(want)+1:], "/")
}

// Transient reports whether err is a CallError of a transient class
// (CallError.Retryable: connection errors, attempt timeouts, 408, 429,
// 5xx, truncated bodies) that outlived the backend's retries.
func Transient(err error) bool {
	var ce *CallError
	return errors.As(err, &ce) && ce.Retryable
}

// CallError is the typed error a remote backend returns when a chat call
// fails after its retries. Status is the HTTP status of the last attempt
// (0 when no HTTP answer arrived: connection error or attempt timeout).
// Retryable says whether the failure class is transient (429, 408, 5xx,
// transport errors, timeouts, truncated bodies): a caller that gets a
// retryable CallError may try again later; a non-retryable one (other 4xx,
// empty choices) will fail the same way again. RetryAfter is the last
// server-directed delay (Retry-After / retry-after-ms headers), zero if none.
// The error text never contains the API key.
type CallError struct {
	// Backend is the backend's Name(), e.g. "openai:qwen3-8b".
	Backend string
	// Status is the HTTP status code of the last attempt, 0 if none.
	Status int
	// Retryable is true for transient failure classes (see type doc).
	Retryable bool
	// RetryAfter is the server-directed delay of the last attempt.
	RetryAfter time.Duration
	// Message is the server's error message (OpenAI error.message), or a
	// short excerpt of a non-JSON error body.
	Message string
	// Attempts is the number of HTTP attempts made (>= 1 once sent).
	Attempts int
	// Err is the underlying cause (a sentinel above, a transport error,
	// context.DeadlineExceeded for an attempt timeout), may be nil.
	Err error
}

// Error formats the failure as "<backend>: chat: HTTP 429 Too Many
// Requests: <message> (3 attempts)".
func (e *CallError) Error() string {
	var b strings.Builder
	b.WriteString(e.Backend)
	b.WriteString(": chat")
	if e.Status != 0 {
		fmt.Fprintf(&b, ": HTTP %d", e.Status)
		if t := http.StatusText(e.Status); t != "" {
			b.WriteString(" " + t)
		}
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	if e.Err != nil {
		b.WriteString(": " + e.Err.Error())
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (%d attempts)", e.Attempts)
	}
	return b.String()
}

// Unwrap returns the underlying cause so errors.Is(err, ErrEmptyResponse)
// and errors.Is(err, context.DeadlineExceeded) work.
func (e *CallError) Unwrap() error { return e.Err }

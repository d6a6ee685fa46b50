package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/internal/textcut"
)

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

package openai

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/spade-pipeline/spade/engines/model"
)

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

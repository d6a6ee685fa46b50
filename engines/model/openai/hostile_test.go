package openai

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/model"
)

// rawServer serves every request with h on loopback: the hostile replies
// below are not ones modeltest's well-formed server produces.
func rawServer(t *testing.T, h http.HandlerFunc) *Backend {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	b, err := New(Config{BaseURL: srv.URL + "/v1", Model: "m", APIKeyEnv: "SPADE_OPENAI_TEST_NO_KEY", MaxRetries: 2,
		BackoffBase: 1e6, BackoffMax: 2e6, MaxResponseBytes: 1 << 20})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

func completion(content string, promptTokens int) []byte {
	return []byte(`{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"` +
		content + `"}}],"usage":{"prompt_tokens":` + strconv.Itoa(promptTokens) + `,"completion_tokens":3,"total_tokens":3}}`)
}

// TestHostileServer: a body larger than MaxResponseBytes, plain or as a
// gzip bomb, fails the call (not retried) instead of filling memory;
// invalid UTF-8 in the content reaches the caller as U+FFFD; a negative
// usage count is 0; a connection reset leaves no ephemeral port in the
// error text (which is stored, and must be the same on a rerun).
func TestHostileServer(t *testing.T) {
	ctx := context.Background()
	t.Run("body over the cap", func(t *testing.T) {
		calls := 0
		b := rawServer(t, func(w http.ResponseWriter, _ *http.Request) {
			calls++
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(completion(strings.Repeat("A", 2<<20), 1))
		})
		_, err := b.Chat(ctx, simpleRequest())
		require.ErrorIs(t, err, model.ErrResponseTooLarge)
		require.ErrorContains(t, err, "over 1048576 bytes")
		require.Equal(t, 1, calls, "not retried")
	})
	t.Run("gzip bomb", func(t *testing.T) {
		var z bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&z, gzip.BestCompression)
		_, _ = zw.Write(completion("", 1)[:100])
		_, _ = io.CopyN(zw, zeroReader{}, 256<<20) // 256 MiB of zeros, ~256 KiB compressed
		_ = zw.Close()
		b := rawServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write(z.Bytes())
		})
		_, err := b.Chat(ctx, simpleRequest())
		require.ErrorIs(t, err, model.ErrResponseTooLarge)
	})
	t.Run("invalid UTF-8 and a negative count", func(t *testing.T) {
		b := rawServer(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(completion("A\xff\xfeB\xc0\x80C", -5))
		})
		resp, err := b.Chat(ctx, simpleRequest())
		require.NoError(t, err)
		got := resp.Choices[0].Message.Content
		require.True(t, utf8.ValidString(got), "%q", got)
		require.Contains(t, got, "A\uFFFD")
		require.Equal(t, 0, resp.Usage.PromptTokens)
	})
	for name, body := range map[string]string{
		"content not a string":     `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":12345}}]}`,
		"tool call without a name": `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[{"id":null,"type":7,"function":null}]}}]}`,
		// The SDK decodes each of these without an error: an empty
		// answer, a dropped tool_calls, the name "123", an empty name.
		"choice null":                   `{"id":"x","object":"chat.completion","model":"m","choices":[null]}`,
		"message null":                  `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"stop","message":null}]}`,
		"message missing":               `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"stop"}]}`,
		"tool_calls not a list":         `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":"add 1","tool_calls":"zzz"}}]}`,
		"tool name a number":            `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":123,"arguments":"{}"}}]}}]}`,
		"custom call named in function": `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"custom","function":{"name":"f","arguments":"{}"},"custom":{"input":"raw"}}]}}]}`,
		"function call named in custom": `{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"arguments":"{}"},"custom":{"name":"f","input":"raw"}}]}}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			b := rawServer(t, func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(body))
			})
			_, err := b.Chat(ctx, simpleRequest())
			require.ErrorIs(t, err, model.ErrMalformedResponse)
		})
	}
	t.Run("connection reset", func(t *testing.T) {
		b := rawServer(t, func(w http.ResponseWriter, _ *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				return
			}
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // close with RST
			}
			_ = conn.Close()
		})
		_, err := b.Chat(ctx, simpleRequest())
		require.Error(t, err)
		require.NotContains(t, err.Error(), "->", "the local address (an ephemeral port) is in the stored error: %v", err)
	})
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestErrorObjectIn200: a gateway that answers 200 with an OpenAI error
// object and no choices fails the call with ErrEmptyResponse and the
// server's message (it used to say only "response has no choices"); a
// plain empty choices list adds no message.
func TestErrorObjectIn200(t *testing.T) {
	for body, want := range map[string]string{
		`{"error":{"message":"model overloaded, try later","code":503}}`: "HTTP 200 OK: model overloaded, try later: model: response has no choices",
		`{"id":"x","object":"chat.completion","choices":[]}`:             "HTTP 200 OK: model: response has no choices",
	} {
		b := rawServer(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, body)
		})
		_, err := b.Chat(context.Background(), simpleRequest())
		require.ErrorIs(t, err, model.ErrEmptyResponse)
		require.ErrorContains(t, err, want)
	}
}

package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/modeltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testKeyEnv = "SPADE_OPENAI_TEST_KEY"
const testKey = "sk-test-4f9c1d2e8a7b6c5d"

// newBackend builds a Backend against srv with fast backoff so that any
// wait a test measures comes from the server's Retry-After, not backoff.
func newBackend(t *testing.T, srv *modeltest.Server, mod func(*Config)) *Backend {
	t.Helper()
	t.Setenv(testKeyEnv, testKey)
	cfg := Config{
		BaseURL:     srv.URL,
		Model:       "qwen3-8b",
		APIKeyEnv:   testKeyEnv,
		Concurrency: 8,
		Timeout:     5 * time.Second,
		MaxRetries:  3,
		BackoffBase: time.Millisecond,
		BackoffMax:  5 * time.Millisecond,
	}
	if mod != nil {
		mod(&cfg)
	}
	b, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

func simpleRequest() model.Request {
	return model.Request{
		Messages: []model.Message{
			{Role: model.RoleSystem, Content: "You are terse."},
			{Role: model.RoleUser, Content: "Say hi."},
		},
		Temperature: 0.7,
		TopP:        0.9,
		MaxTokens:   64,
		Seed:        42,
		Stop:        []string{"\n\n"},
		Meta:        map[string]string{"spade.task": "agent", "spade.secret_meta": "meta-value-never-sent"},
	}
}

func textHandler(text string) modeltest.Handler {
	return func(req modeltest.Request) modeltest.Reply {
		n := max(req.Chat.N, 1)
		out := make([]model.Choice, n)
		for i := range out {
			out[i] = model.Choice{Message: model.Message{Role: model.RoleAssistant, Content: fmt.Sprintf("%s #%d", text, i)}}
		}
		return modeltest.Reply{Choices: out, Usage: &model.Usage{PromptTokens: 11, CompletionTokens: 3}}
	}
}

func TestChatText(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithHandler(textHandler("hi")), modeltest.WithAPIKey(testKey), modeltest.WithModel("served-qwen"))
	b := newBackend(t, srv, nil)
	assert.Equal(t, "openai:qwen3-8b", b.Name())

	resp, err := b.Chat(context.Background(), simpleRequest())
	require.NoError(t, err)
	require.Len(t, resp.Choices, 1)
	assert.Equal(t, "hi #0", resp.Choices[0].Message.Content)
	assert.Equal(t, model.RoleAssistant, resp.Choices[0].Message.Role)
	assert.Equal(t, "stop", resp.Choices[0].FinishReason)
	assert.Equal(t, "served-qwen", resp.Model)
	assert.Equal(t, model.Usage{PromptTokens: 11, CompletionTokens: 3}, resp.Usage)

	reqs := srv.Requests()
	require.Len(t, reqs, 1)
	got := reqs[0]
	assert.Equal(t, "Bearer "+testKey, got.Header.Get("Authorization"))
	assert.Equal(t, "qwen3-8b", got.Model)
	assert.Equal(t, 0.7, got.Chat.Temperature)
	assert.Equal(t, 0.9, got.Chat.TopP)
	assert.Equal(t, 64, got.Chat.MaxTokens)
	assert.Equal(t, int64(42), got.Chat.Seed)
	assert.Equal(t, []string{"\n\n"}, got.Chat.Stop)
	assert.Equal(t, simpleRequest().Messages, got.Chat.Messages)
	// Meta must never reach the wire, under any key.
	assert.NotContains(t, got.Keys, "meta")
	assert.NotContains(t, got.Keys, "metadata")
	assert.NotContains(t, string(got.Body), "meta-value-never-sent")
	assert.NotContains(t, string(got.Body), "spade.task")
	// n=1 is the server default and is not sent.
	assert.NotContains(t, got.Keys, "n")
}

func TestChatZeroParamsStillSendTemperatureAndSeed(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithHandler(textHandler("x")))
	b := newBackend(t, srv, nil)
	_, err := b.Chat(context.Background(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "q"}}})
	require.NoError(t, err)
	got := srv.Requests()[0]
	assert.Equal(t, []string{"messages", "model", "seed", "temperature"}, got.Keys)
}

func TestChatConnectionRefusedIsRetried(t *testing.T) {
	srv, err := modeltest.New()
	require.NoError(t, err)
	srv.Close() // nothing listens on the port any more
	t.Setenv(testKeyEnv, testKey)
	b, err := New(Config{BaseURL: srv.URL, Model: "m", APIKeyEnv: testKeyEnv, MaxRetries: 2, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
	require.NoError(t, err)
	defer b.Close()
	_, err = b.Chat(context.Background(), simpleRequest())
	var ce *model.CallError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 0, ce.Status)
	assert.True(t, ce.Retryable)
	assert.Equal(t, 3, ce.Attempts)
	assert.Contains(t, err.Error(), "transport:")
	assert.NotContains(t, err.Error(), testKey)
}

func TestChatNSamples(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithHandler(textHandler("s")))
	b := newBackend(t, srv, nil)
	req := simpleRequest()
	req.N = 4
	resp, err := b.Chat(context.Background(), req)
	require.NoError(t, err)
	require.Len(t, resp.Choices, 4)
	for i, c := range resp.Choices {
		assert.Equal(t, fmt.Sprintf("s #%d", i), c.Message.Content)
	}
	assert.Equal(t, 4, srv.Requests()[0].Chat.N)
}

func TestChatToolCallsRoundTrip(t *testing.T) {
	tools := []model.Tool{
		{Name: "add_item", Description: "Add an item to the cart.", Parameters: `{"type":"object","properties":{"sku":{"type":"string"},"qty":{"type":"integer","minimum":1}},"required":["sku"]}`},
		{Name: "checkout", Description: "Pay.", Parameters: ""},
	}
	history := []model.Message{
		{Role: model.RoleSystem, Content: "Use tools."},
		{Role: model.RoleUser, Content: "Buy two apples."},
		{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "call_1", Name: "add_item", Arguments: `{"sku":"apple","qty":2}`}}},
		{Role: model.RoleTool, ToolCallID: "call_1", Content: "cart: apple x2"},
		{Role: model.RoleAssistant, Content: "Added. Paying now.", ToolCalls: []model.ToolCall{{ID: "call_2", Name: "checkout", Arguments: `{}`}}},
		{Role: model.RoleTool, ToolCallID: "call_2", Content: "paid"},
	}
	srv := modeltest.Start(t, modeltest.WithHandler(func(req modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Choices: []model.Choice{{Message: model.Message{
			Role:      model.RoleAssistant,
			ToolCalls: []model.ToolCall{{ID: "call_9", Name: "add_item", Arguments: `{"sku":"pear"}`}, {ID: "call_10", Name: "checkout", Arguments: `{}`}},
		}}}}
	}))
	b := newBackend(t, srv, nil)
	resp, err := b.Chat(context.Background(), model.Request{Messages: history, Tools: tools})
	require.NoError(t, err)
	require.Len(t, resp.Choices, 1)
	c := resp.Choices[0]
	assert.Equal(t, "tool_calls", c.FinishReason)
	assert.Equal(t, "", c.Message.Content)
	assert.Equal(t, []model.ToolCall{
		{ID: "call_9", Name: "add_item", Arguments: `{"sku":"pear"}`},
		{ID: "call_10", Name: "checkout", Arguments: `{}`},
	}, c.Message.ToolCalls)

	got := srv.Requests()[0].Chat
	assert.Equal(t, history, got.Messages)
	require.Len(t, got.Tools, 2)
	assert.Equal(t, tools[0].Name, got.Tools[0].Name)
	assert.Equal(t, tools[0].Description, got.Tools[0].Description)
	assert.JSONEq(t, tools[0].Parameters, got.Tools[0].Parameters)
	assert.Equal(t, "", got.Tools[1].Parameters)
	// The raw body carries tools in the OpenAI function-tool shape.
	var raw struct {
		Tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	require.NoError(t, json.Unmarshal(srv.Requests()[0].Body, &raw))
	assert.Equal(t, "function", raw.Tools[0].Type)
	assert.Equal(t, "add_item", raw.Tools[0].Function.Name)
}

func TestChatRetryAfterHonoured(t *testing.T) {
	future := func() string { return time.Now().Add(3 * time.Second).UTC().Format(http.TimeFormat) }
	seconds := func() string { return "1" }
	cases := []struct {
		name       string
		kind       modeltest.FaultKind
		retryAfter func() string
		minWait    time.Duration
		maxWait    time.Duration
	}{
		{"429 seconds", modeltest.FaultRateLimit, seconds, time.Second, 2500 * time.Millisecond},
		{"503 seconds", modeltest.FaultUnavailable, seconds, time.Second, 2500 * time.Millisecond},
		// An HTTP-date has one-second resolution: 3 s ahead waits 2-3 s.
		{"429 http-date", modeltest.FaultRateLimit, future, 1900 * time.Millisecond, 4 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fault := modeltest.Fault{Kind: tc.kind, RetryAfter: tc.retryAfter()}
			srv := modeltest.Start(t, modeltest.WithHandler(textHandler("ok")), modeltest.WithFaultSequence(fault))
			b := newBackend(t, srv, nil)
			start := time.Now()
			resp, err := b.Chat(context.Background(), simpleRequest())
			elapsed := time.Since(start)
			require.NoError(t, err)
			assert.Equal(t, "ok #0", resp.Choices[0].Message.Content)
			assert.Equal(t, 2, srv.Count())
			assert.GreaterOrEqual(t, elapsed, tc.minWait, "waited less than Retry-After")
			assert.Less(t, elapsed, tc.maxWait)
		})
	}
}

func TestChatRetryAfterTooLongGivesUp(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithFaultSequence(modeltest.Fault{Kind: modeltest.FaultRateLimit, RetryAfter: "3600"}))
	b := newBackend(t, srv, func(c *Config) { c.MaxRetryAfter = 10 * time.Second })
	start := time.Now()
	_, err := b.Chat(context.Background(), simpleRequest())
	require.Less(t, time.Since(start), 2*time.Second)
	var ce *model.CallError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, http.StatusTooManyRequests, ce.Status)
	assert.True(t, ce.Retryable)
	assert.Equal(t, time.Hour, ce.RetryAfter)
	assert.Equal(t, 1, srv.Count())
}

func TestChatServerErrorThenSuccess(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithHandler(textHandler("ok")),
		modeltest.WithFaultSequence(modeltest.Fault{Kind: modeltest.FaultServerError}, modeltest.Fault{Kind: modeltest.FaultServerError}))
	b := newBackend(t, srv, nil)
	resp, err := b.Chat(context.Background(), simpleRequest())
	require.NoError(t, err)
	assert.Equal(t, "ok #0", resp.Choices[0].Message.Content)
	assert.Equal(t, 3, srv.Count())
}

func TestChatRetriesExhausted(t *testing.T) {
	seq := make([]modeltest.Fault, 10)
	for i := range seq {
		seq[i] = modeltest.Fault{Kind: modeltest.FaultServerError, Message: "boom"}
	}
	srv := modeltest.Start(t, modeltest.WithFaultSequence(seq...))
	b := newBackend(t, srv, func(c *Config) { c.MaxRetries = 2 })
	_, err := b.Chat(context.Background(), simpleRequest())
	var ce *model.CallError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 500, ce.Status)
	assert.True(t, ce.Retryable)
	assert.Equal(t, 3, ce.Attempts)
	assert.Equal(t, "boom", ce.Message)
	assert.Equal(t, 3, srv.Count())
	assert.Equal(t, "openai:qwen3-8b: chat: HTTP 500 Internal Server Error: boom (3 attempts)", err.Error())
}

func TestChatNoRetriesWhenNegative(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithFaultSequence(modeltest.Fault{Kind: modeltest.FaultServerError}))
	b := newBackend(t, srv, func(c *Config) { c.MaxRetries = -1 })
	_, err := b.Chat(context.Background(), simpleRequest())
	require.Error(t, err)
	assert.Equal(t, 1, srv.Count())
}

func TestChatTimeoutThenSuccess(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithHandler(textHandler("late")), modeltest.WithFaultSequence(modeltest.Fault{Kind: modeltest.FaultHang}))
	b := newBackend(t, srv, func(c *Config) { c.Timeout = 300 * time.Millisecond })
	start := time.Now()
	resp, err := b.Chat(context.Background(), simpleRequest())
	require.NoError(t, err)
	assert.Equal(t, "late #0", resp.Choices[0].Message.Content)
	assert.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	assert.Equal(t, 2, srv.Count())
}

func TestChatTimeoutExhausted(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithFaultShare(modeltest.Fault{Kind: modeltest.FaultHang}, 1, 0))
	b := newBackend(t, srv, func(c *Config) { c.Timeout = 100 * time.Millisecond; c.MaxRetries = 1 })
	_, err := b.Chat(context.Background(), simpleRequest())
	require.ErrorIs(t, err, model.ErrTimeout)
	assert.NotErrorIs(t, err, context.DeadlineExceeded)
	var ce *model.CallError
	require.ErrorAs(t, err, &ce)
	assert.True(t, ce.Retryable)
	assert.Equal(t, 2, ce.Attempts)
}

func TestChatClientErrorNotRetried(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithFaultSequence(modeltest.Fault{Kind: modeltest.FaultBadRequest, Message: "The model `qwen3-8b` does not exist."}))
	b := newBackend(t, srv, nil)
	_, err := b.Chat(context.Background(), simpleRequest())
	var ce *model.CallError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, http.StatusBadRequest, ce.Status)
	assert.False(t, ce.Retryable)
	assert.Equal(t, 1, ce.Attempts)
	assert.Contains(t, err.Error(), "HTTP 400 Bad Request: The model `qwen3-8b` does not exist.")
	assert.Equal(t, 1, srv.Count())
}

func TestChatAPIKeyNeverInErrors(t *testing.T) {
	// A server that echoes the Authorization header back in its message,
	// as some misconfigured proxies do.
	echo := func(req modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Fault: modeltest.Fault{Kind: modeltest.FaultBadRequest, Message: "bad auth header: " + req.Header.Get("Authorization")}}
	}
	srv := modeltest.Start(t, modeltest.WithHandler(echo))
	b := newBackend(t, srv, nil)
	_, err := b.Chat(context.Background(), simpleRequest())
	require.Error(t, err)
	assert.Equal(t, "Bearer "+testKey, srv.Requests()[0].Header.Get("Authorization"))
	assert.NotContains(t, err.Error(), testKey)
	assert.Contains(t, err.Error(), "[REDACTED]")
	assert.NotContains(t, fmt.Sprintf("%+v %#v", err, b), testKey)

	// Wrong key: 401, not retried, key absent.
	srv2 := modeltest.Start(t, modeltest.WithAPIKey("other-key"))
	b2 := newBackend(t, srv2, nil)
	_, err = b2.Chat(context.Background(), simpleRequest())
	var ce *model.CallError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, http.StatusUnauthorized, ce.Status)
	assert.False(t, ce.Retryable)
	assert.NotContains(t, err.Error(), testKey)
}

func TestChatNoKeyNoHeader(t *testing.T) {
	srv := modeltest.Start(t)
	t.Setenv("SPADE_EMPTY_KEY", "")
	t.Setenv("OPENAI_API_KEY", "sk-ambient-should-not-be-sent")
	b, err := New(Config{BaseURL: srv.URL, Model: "m", APIKeyEnv: "SPADE_EMPTY_KEY"})
	require.NoError(t, err)
	defer b.Close()
	_, err = b.Chat(context.Background(), simpleRequest())
	require.NoError(t, err)
	assert.Empty(t, srv.Requests()[0].Header.Get("Authorization"))
}

func TestChatTruncatedJSON(t *testing.T) {
	t.Run("then success", func(t *testing.T) {
		srv := modeltest.Start(t, modeltest.WithHandler(textHandler("whole")), modeltest.WithFaultSequence(modeltest.Fault{Kind: modeltest.FaultTruncated}))
		b := newBackend(t, srv, nil)
		resp, err := b.Chat(context.Background(), simpleRequest())
		require.NoError(t, err)
		assert.Equal(t, "whole #0", resp.Choices[0].Message.Content)
		assert.Equal(t, 2, srv.Count())
	})
	t.Run("always", func(t *testing.T) {
		srv := modeltest.Start(t, modeltest.WithFaultShare(modeltest.Fault{Kind: modeltest.FaultTruncated}, 1, 0))
		b := newBackend(t, srv, func(c *Config) { c.MaxRetries = 1 })
		_, err := b.Chat(context.Background(), simpleRequest())
		require.ErrorIs(t, err, model.ErrMalformedResponse)
		var ce *model.CallError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, 200, ce.Status)
		assert.Equal(t, 2, srv.Count())
	})
}

func TestChatEmptyChoices(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithFaultSequence(modeltest.Fault{Kind: modeltest.FaultEmptyChoices}))
	b := newBackend(t, srv, nil)
	resp, err := b.Chat(context.Background(), simpleRequest())
	require.ErrorIs(t, err, model.ErrEmptyResponse)
	assert.Empty(t, resp.Choices)
	assert.Equal(t, 1, srv.Count())
}

func TestChatHugeResponse(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithFaultSequence(modeltest.Fault{Kind: modeltest.FaultHuge}))
	b := newBackend(t, srv, nil)
	resp, err := b.Chat(context.Background(), simpleRequest())
	require.NoError(t, err)
	assert.Len(t, resp.Choices[0].Message.Content, modeltest.HugeBytes)
}

func TestChatContextCancelled(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithFaultShare(modeltest.Fault{Kind: modeltest.FaultHang}, 1, 0))
	b := newBackend(t, srv, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := b.Chat(ctx, simpleRequest())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 2*time.Second)
	var ce *model.CallError
	require.ErrorAs(t, err, &ce)
	assert.False(t, ce.Retryable)

	// Cancelled while waiting out a Retry-After.
	srv2 := modeltest.Start(t, modeltest.WithFaultSequence(modeltest.Fault{Kind: modeltest.FaultRateLimit, RetryAfter: "30"}))
	b2 := newBackend(t, srv2, nil)
	ctx2, cancel2 := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel2)
	start = time.Now()
	_, err = b2.Chat(ctx2, simpleRequest())
	require.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), 2*time.Second)
}

func TestChatConcurrencyBound(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithHandler(textHandler("c")), modeltest.WithLatency(40*time.Millisecond))
	b := newBackend(t, srv, func(c *Config) { c.Concurrency = 4 })
	var wg sync.WaitGroup
	errs := make([]error, 32)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := simpleRequest()
			req.Seed = int64(i)
			_, errs[i] = b.Chat(context.Background(), req)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, 32, srv.Count())
	assert.Equal(t, 4, srv.MaxInFlight(), "in-flight requests must reach but never exceed Concurrency")
}

func TestChatBadRequestsNotSent(t *testing.T) {
	srv := modeltest.Start(t)
	b := newBackend(t, srv, nil)
	cases := []struct {
		name string
		req  model.Request
		want string
	}{
		{"no messages", model.Request{}, "no messages"},
		{"unknown role", model.Request{Messages: []model.Message{{Role: "narrator", Content: "x"}}}, `message 0: unknown role "narrator"`},
		{"tool without id", model.Request{Messages: []model.Message{{Role: model.RoleTool, Content: "x"}}}, "tool_call_id"},
		{"bad schema", model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "x"}}, Tools: []model.Tool{{Name: "f", Parameters: "[1,2]"}}}, "tool 0 (f): field parameters is not a JSON object"},
		{"negative n", model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "x"}}, N: -1}, "negative n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.Chat(context.Background(), tc.req)
			require.ErrorIs(t, err, model.ErrBadRequest)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	assert.Equal(t, 0, srv.Count())
}

func TestNewConfigErrors(t *testing.T) {
	_, err := New(Config{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Model is empty")
	_, err = New(Config{Model: "m", Concurrency: -1})
	require.Error(t, err)
}

func TestRetryAfterParsing(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{"none", nil, 0},
		{"seconds", map[string]string{"Retry-After": "7"}, 7 * time.Second},
		{"fractional seconds", map[string]string{"Retry-After": "0.5"}, 500 * time.Millisecond},
		{"http date", map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, 90 * time.Second},
		{"date in past", map[string]string{"Retry-After": now.Add(-time.Minute).Format(http.TimeFormat)}, 0},
		{"ms wins", map[string]string{"Retry-After": "7", "retry-after-ms": "250"}, 250 * time.Millisecond},
		{"garbage", map[string]string{"Retry-After": "soon"}, 0},
		{"negative", map[string]string{"Retry-After": "-3"}, 0},
		{"absurd", map[string]string{"Retry-After": "1e300"}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.header {
				h.Set(k, v)
			}
			assert.Equal(t, tc.want, retryAfter(h, now))
		})
	}
}

func TestBackoffDeterministicAndBounded(t *testing.T) {
	base, maxD := 100*time.Millisecond, 2*time.Second
	for attempt := 0; attempt < 8; attempt++ {
		d := min(base<<attempt, maxD)
		for seed := uint64(0); seed < 50; seed++ {
			got := backoff(base, maxD, attempt, seed)
			require.GreaterOrEqual(t, got, d/2)
			require.LessOrEqual(t, got, d)
			require.Equal(t, got, backoff(base, maxD, attempt, seed))
		}
	}
	// Different requests spread out.
	seen := map[time.Duration]bool{}
	for seed := uint64(0); seed < 20; seed++ {
		seen[backoff(base, maxD, 3, seed)] = true
	}
	assert.Greater(t, len(seen), 15)
}

func TestErrorMessageExtraction(t *testing.T) {
	assert.Equal(t, "nope", errorMessage([]byte(`{"error":{"message":"nope","type":"x"}}`)))
	assert.Equal(t, "flat", errorMessage([]byte(`{"error":"flat"}`)))
	assert.Equal(t, "<html> bad gateway </html>", errorMessage([]byte("<html>\n bad gateway\n</html>")))
	long := errorMessage([]byte(strings.Repeat("z", 500)))
	assert.Len(t, long, 203)
}

// countingConn counts Write calls on a client connection.
type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// Each request leaves in one write (headers and JSON body together, one
// TCP segment on loopback) on one reused connection, retries included.
func TestChatOneWritePerRequest(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithHandler(textHandler("hi")),
		modeltest.WithFaultSequence(modeltest.Fault{Kind: modeltest.FaultServerError}))
	var writes, dials atomic.Int64
	d := &net.Dialer{}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{Conn: c, writes: &writes}, nil
	}}
	b := newBackend(t, srv, func(c *Config) { c.HTTPClient = &http.Client{Transport: tr} })
	for range 3 {
		resp, err := b.Chat(context.Background(), simpleRequest())
		require.NoError(t, err)
		assert.Equal(t, "hi #0", resp.Choices[0].Message.Content)
	}
	reqs := srv.Requests()
	require.Len(t, reqs, 4, "one 500 retried, then three answers")
	for _, r := range reqs {
		assert.Equal(t, simpleRequest().Messages, r.Chat.Messages, "the body arrives whole")
	}
	assert.Equal(t, int64(4), writes.Load(), "writes for 4 requests")
	assert.Equal(t, int64(1), dials.Load())
}

// The transport New builds keeps Concurrency idle connections: a second
// wave of Concurrency simultaneous calls dials nothing.
func TestChatConnectionsReusedAtConcurrency(t *testing.T) {
	const conc = 16
	srv := modeltest.Start(t, modeltest.WithHandler(textHandler("hi")), modeltest.WithLatency(30*time.Millisecond), modeltest.WithoutRecording())
	b := newBackend(t, srv, func(c *Config) { c.Concurrency = conc })
	var fresh, reused atomic.Int64
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		if i.Reused {
			reused.Add(1)
		} else {
			fresh.Add(1)
		}
	}})
	wave := func() {
		var wg sync.WaitGroup
		for range conc {
			wg.Go(func() {
				_, err := b.Chat(ctx, simpleRequest())
				assert.NoError(t, err)
			})
		}
		wg.Wait()
	}
	wave()
	first := fresh.Load()
	require.LessOrEqual(t, first, int64(conc))
	wave()
	wave()
	assert.Equal(t, first, fresh.Load(), "later waves dialed new connections")
	assert.Equal(t, int64(3*conc), fresh.Load()+reused.Load())
}

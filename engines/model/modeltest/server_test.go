package modeltest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/spade-pipeline/spade/engines/model"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func post(t *testing.T, s *Server, body string) (int, http.Header, []byte) {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Post(s.URL+"/chat/completions", "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, resp.Header, b
}

func newTestClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
}

// postWith posts body on client and fails unless the answer is 200.
func postWith(client *http.Client, s *Server, body string) error {
	resp, err := client.Post(s.URL+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func TestWireFormat(t *testing.T) {
	s := Start(t, WithModel("wire-model"), WithHandler(func(req Request) Reply {
		return Reply{Choices: []model.Choice{
			{Message: model.Message{Role: model.RoleAssistant, Content: "hello"}},
			{Message: model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{Name: "look", Arguments: `{"at":"door"}`}}}},
			{Message: model.Message{Role: model.RoleAssistant, Content: "cut"}, FinishReason: "length"},
		}}
	}))
	status, hdr, body := post(t, s, `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi "},{"type":"text","text":"there"}]}],"n":3,"stop":"END","max_completion_tokens":9,"metadata":{"x":"y"}}`)
	require.Equal(t, 200, status)
	assert.Equal(t, "application/json", hdr.Get("Content-Type"))
	var got map[string]any
	require.NoError(t, json.Unmarshal(body, &got))
	assert.Equal(t, "chat.completion", got["object"])
	assert.Equal(t, "wire-model", got["model"])
	choices := got["choices"].([]any)
	require.Len(t, choices, 3)
	c1 := choices[1].(map[string]any)
	msg := c1["message"].(map[string]any)
	assert.Nil(t, msg["content"], "tool-call-only message has null content")
	assert.Equal(t, "tool_calls", c1["finish_reason"])
	tc := msg["tool_calls"].([]any)[0].(map[string]any)
	assert.Equal(t, "function", tc["type"])
	assert.NotEmpty(t, tc["id"])
	assert.Equal(t, map[string]any{"name": "look", "arguments": `{"at":"door"}`}, tc["function"])
	assert.Equal(t, "stop", choices[0].(map[string]any)["finish_reason"])
	assert.Equal(t, "length", choices[2].(map[string]any)["finish_reason"])
	usage := got["usage"].(map[string]any)
	assert.Equal(t, usage["prompt_tokens"].(float64)+usage["completion_tokens"].(float64), usage["total_tokens"])

	r := s.Requests()[0]
	assert.Equal(t, "hi there", r.Chat.Messages[0].Content)
	assert.Equal(t, []string{"END"}, r.Chat.Stop)
	assert.Equal(t, 9, r.Chat.MaxTokens)
	assert.Equal(t, 3, r.Chat.N)
	assert.Equal(t, []string{"max_completion_tokens", "messages", "metadata", "model", "n", "stop"}, r.Keys)
}

func TestBadRequests(t *testing.T) {
	s := Start(t)
	for _, body := range []string{`nope`, `{"messages":[{"role":"user","content":"x"}]}`, `{"model":"m","messages":[]}`, `{"model":"m","messages":[{"role":"user","content":5}]}`, `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`} {
		status, _, b := post(t, s, body)
		assert.Equal(t, 400, status, body)
		assert.Contains(t, string(b), `"type":"invalid_request_error"`)
	}
}

func TestModelsEndpoint(t *testing.T) {
	s := Start(t, WithModel("qwen"))
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(s.URL + "/models")
	require.NoError(t, err)
	defer resp.Body.Close()
	var got struct {
		Object string `json:"object"`
		Data   []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
	assert.Equal(t, "list", got.Object)
	assert.Equal(t, "qwen", got.Data[0].ID)
}

func TestFaults(t *testing.T) {
	const req = `{"model":"m","messages":[{"role":"user","content":"x"}]}`
	cases := []struct {
		fault  Fault
		status int
		check  func(t *testing.T, h http.Header, b []byte)
	}{
		{Fault{Kind: FaultRateLimit, RetryAfter: "2"}, 429, func(t *testing.T, h http.Header, b []byte) {
			assert.Equal(t, "2", h.Get("Retry-After"))
			assert.Contains(t, string(b), "rate_limit_exceeded")
		}},
		{Fault{Kind: FaultServerError}, 500, nil},
		{Fault{Kind: FaultUnavailable, RetryAfter: "1"}, 503, func(t *testing.T, h http.Header, _ []byte) { assert.Equal(t, "1", h.Get("Retry-After")) }},
		{Fault{Kind: FaultBadRequest, Message: "no such model"}, 400, func(t *testing.T, _ http.Header, b []byte) { assert.Contains(t, string(b), "no such model") }},
		{Fault{Kind: FaultTruncated}, 200, func(t *testing.T, _ http.Header, b []byte) {
			assert.True(t, strings.HasPrefix(string(b), `{"id":`))
			assert.False(t, json.Valid(b))
		}},
		{Fault{Kind: FaultEmptyChoices}, 200, func(t *testing.T, _ http.Header, b []byte) { assert.Contains(t, string(b), `"choices":[]`) }},
		{Fault{Kind: FaultHuge}, 200, func(t *testing.T, _ http.Header, b []byte) { assert.Greater(t, len(b), HugeBytes) }},
	}
	for _, tc := range cases {
		t.Run(tc.fault.Kind.String(), func(t *testing.T) {
			s := Start(t, WithFaultSequence(tc.fault))
			status, h, b := post(t, s, req)
			assert.Equal(t, tc.status, status)
			if tc.check != nil {
				tc.check(t, h, b)
			}
			status, _, _ = post(t, s, req)
			assert.Equal(t, 200, status, "sequence applies to the first request only")
		})
	}
}

func TestSlowAndLatency(t *testing.T) {
	s := Start(t, WithLatency(50*time.Millisecond), WithFaultSequence(Fault{Kind: FaultSlow, Delay: 100 * time.Millisecond}))
	start := time.Now()
	post(t, s, `{"model":"m","messages":[{"role":"user","content":"x"}]}`)
	assert.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
	start = time.Now()
	post(t, s, `{"model":"m","messages":[{"role":"user","content":"x"}]}`)
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond, "fixed latency applies to every answer")
}

// The latency counts from the request's arrival: a Handler that takes
// most of it does not delay the answer further.
func TestLatencyIncludesServerWork(t *testing.T) {
	const latency, work = 300 * time.Millisecond, 200 * time.Millisecond
	s := Start(t, WithLatency(latency), WithHandler(func(Request) Reply {
		time.Sleep(work)
		return Reply{Choices: []model.Choice{{Message: model.Message{Role: model.RoleAssistant, Content: "ok"}}}}
	}))
	start := time.Now()
	code, _, _ := post(t, s, `{"model":"m","messages":[{"role":"user","content":"x"}]}`)
	took := time.Since(start)
	assert.Equal(t, http.StatusOK, code)
	assert.GreaterOrEqual(t, took, latency)
	assert.Less(t, took, latency+work-50*time.Millisecond, "latency added after the handler's own work")
}

func TestHangEndsOnClientCancelAndClose(t *testing.T) {
	s, err := New(WithFaultShare(Fault{Kind: FaultHang}, 1, 1))
	require.NoError(t, err)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/chat/completions", bytes.NewReader([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`)))
	resp, err := client.Do(req)
	if err == nil {
		resp.Body.Close()
	}
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// A hang still in progress ends when the server closes.
	go func() {
		r, _ := http.NewRequest(http.MethodPost, s.URL+"/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"x"}]}`))
		if resp, err := client.Do(r); err == nil {
			resp.Body.Close()
		}
	}()
	require.Eventually(t, func() bool { return s.Count() == 2 }, 5*time.Second, 5*time.Millisecond)
	done := make(chan struct{})
	go func() { s.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a hanging handler")
	}
	s.Close() // idempotent
}

func TestFaultShareDeterministic(t *testing.T) {
	pattern := func() []bool {
		s := Start(t, WithFaultShare(Fault{Kind: FaultServerError}, 0.3, 42))
		var out []bool
		for i := 0; i < 60; i++ {
			status, _, _ := post(t, s, `{"model":"m","messages":[{"role":"user","content":"x"}]}`)
			out = append(out, status == 500)
		}
		return out
	}
	a, b := pattern(), pattern()
	assert.Equal(t, a, b)
	n := 0
	for _, f := range a {
		if f {
			n++
		}
	}
	assert.InDelta(t, 18, n, 10, "about 30%% of 60 requests fault")
}

func TestDefaultHandler(t *testing.T) {
	h := DefaultHandler(DefaultEnvSource, DefaultHint)
	design := h(Request{Chat: model.Request{N: 2, Messages: []model.Message{{Role: model.RoleSystem, Content: "You are the Environment Designer."}, {Role: model.RoleUser, Content: "Design."}}}})
	require.Len(t, design.Choices, 2)
	assert.Contains(t, design.Choices[0].Message.Content, "```python\n"+DefaultEnvSource+"```")

	hint := h(Request{Chat: model.Request{Messages: []model.Message{{Role: model.RoleSystem, Content: "Write a privileged hint; the agent never sees the environment source."}}}})
	assert.Equal(t, DefaultHint, hint.Choices[0].Message.Content)

	agentReq := model.Request{N: 8, Messages: []model.Message{
		{Role: model.RoleSystem, Content: "Play."},
		{Role: model.RoleUser, Content: "Total: 0.\nValid actions: add 1 | add 2 | add 3"},
	}}
	agent := h(Request{Chat: agentReq})
	seen := map[string]bool{}
	for _, c := range agent.Choices {
		assert.Contains(t, []string{"add 1", "add 2", "add 3"}, c.Message.Content)
		seen[c.Message.Content] = true
	}
	assert.Greater(t, len(seen), 1, "samples vary")
	assert.Equal(t, agent, h(Request{Chat: agentReq}), "deterministic")

	tools := h(Request{Chat: model.Request{Tools: []model.Tool{{Name: "list_orders"}}, Messages: []model.Message{{Role: model.RoleUser, Content: "Refund order 7."}}}})
	require.Len(t, tools.Choices[0].Message.ToolCalls, 1)
	assert.Equal(t, "list_orders", tools.Choices[0].Message.ToolCalls[0].Name)
	assert.JSONEq(t, `{}`, tools.Choices[0].Message.ToolCalls[0].Arguments)

	none := h(Request{Chat: model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "What is 2+2?"}}}})
	assert.Equal(t, "done", none.Choices[0].Message.Content)
}

package openai

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/model"
)

// tokenServer answers every chat call with body (a canned response in a
// server's own shape) and keeps each request's top-level fields. With
// refuse, a request carrying return_token_ids gets transformers serve's
// answer to fields it does not know: 422 with FastAPI's detail.
type tokenServer struct {
	mu     sync.Mutex
	bodies []map[string]json.RawMessage
}

func startTokenServer(t *testing.T, body string, refuse bool) (*httptest.Server, *tokenServer) {
	t.Helper()
	ts := &tokenServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var fields map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(raw, &fields))
		ts.mu.Lock()
		ts.bodies = append(ts.bodies, fields)
		ts.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if _, ok := fields["return_token_ids"]; ok && refuse {
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, `{"detail":"Unexpected fields in the request: {'return_token_ids', 'return_prompt_token_ids', 'return_tokens_as_token_ids'}"}`)
			return
		}
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv, ts
}

func tokenBackend(t *testing.T, url string, on bool, log *slog.Logger) *Backend {
	t.Helper()
	b, err := New(Config{BaseURL: url + "/v1", Model: "m", APIKeyEnv: "SPADE_TEST_NO_KEY", Timeout: 5 * time.Second,
		MaxRetries: -1, ReturnTokens: on, Logger: log, ExtraBody: map[string]any{"top_k": 20}})
	require.NoError(t, err)
	return b
}

var tokenReq = model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}, Temperature: 1}

// vLLM (>= 0.10.2) with return_token_ids and logprobs: prompt_token_ids at
// the top level, token_ids per choice, logprobs.content per token (here
// written "token_id:N", return_tokens_as_token_ids), as its
// ChatCompletionResponse serializes them.
const vllmTokenBody = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m",
"choices":[{"index":0,"message":{"role":"assistant","content":"Hello","tool_calls":[],"reasoning_content":null},
 "logprobs":{"content":[{"token":"token_id:9906","logprob":-0.25,"bytes":[72,101,108,108,111],"top_logprobs":[]},
                        {"token":"token_id:151645","logprob":-0.0001,"bytes":[],"top_logprobs":[]}]},
 "finish_reason":"stop","stop_reason":null,"token_ids":[9906,151645]}],
"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2},
"prompt_logprobs":null,"prompt_token_ids":[151644,872,198]}`

// SGLang with return_token_ids and return_prompt_token_ids: both per
// choice, logprobs with the token text.
const sglangTokenBody = `{"id":"x","object":"chat.completion","created":1,"model":"m",
"choices":[{"index":0,"message":{"role":"assistant","content":"Hi","reasoning_content":null,"tool_calls":null},
 "logprobs":{"content":[{"token":"Hi","bytes":[72,105],"logprob":-1.5,"top_logprobs":[]}]},
 "finish_reason":"stop","matched_stop":151645,"prompt_token_ids":[1,2,3,4],"token_ids":[13048]}],
"usage":{"prompt_tokens":4,"total_tokens":5,"completion_tokens":1}}`

// TestChatTokens: with ReturnTokens the request asks for token ids and
// log-probs in both engines' fields, and their answers' ids and
// log-probs reach Choice.Tokens; without it nothing is asked and nothing
// read.
func TestChatTokens(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       model.Tokens
	}{
		{"vllm", vllmTokenBody, model.Tokens{PromptIDs: []int64{151644, 872, 198}, CompletionIDs: []int64{9906, 151645}, Logprobs: []float64{-0.25, -0.0001}}},
		{"sglang", sglangTokenBody, model.Tokens{PromptIDs: []int64{1, 2, 3, 4}, CompletionIDs: []int64{13048}, Logprobs: []float64{-1.5}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, ts := startTokenServer(t, tc.body, false)
			resp, err := tokenBackend(t, srv.URL, true, nil).Chat(context.Background(), tokenReq)
			require.NoError(t, err)
			require.NotNil(t, resp.Choices[0].Tokens)
			assert.Equal(t, tc.want, *resp.Choices[0].Tokens)
			sent := ts.bodies[0]
			for _, k := range []string{"logprobs", "return_token_ids", "return_prompt_token_ids", "return_tokens_as_token_ids"} {
				assert.Equal(t, "true", string(sent[k]), k)
			}
			assert.Equal(t, "20", string(sent["top_k"]), "extra_body still sent")

			resp, err = tokenBackend(t, srv.URL, false, nil).Chat(context.Background(), tokenReq)
			require.NoError(t, err)
			for _, k := range []string{"logprobs", "return_token_ids"} {
				assert.NotContains(t, ts.bodies[1], k)
			}
			// The server answers with its fields all the same (a server
			// started to always return them): they are read, as sent.
			assert.NotNil(t, resp.Choices[0].Tokens)
		})
	}
}

// TestChatTokensRefused: a server that refuses the fields (transformers
// serve: 422 "Unexpected fields") gets the call again without them, at
// once and for every later call; one warning says so; the answer has no
// Tokens.
func TestChatTokensRefused(t *testing.T) {
	plain := strings.Replace(sglangTokenBody, `,"prompt_token_ids":[1,2,3,4],"token_ids":[13048]`, "", 1)
	plain = strings.Replace(plain, `{"content":[{"token":"Hi","bytes":[72,105],"logprob":-1.5,"top_logprobs":[]}]}`, "null", 1)
	srv, ts := startTokenServer(t, plain, true)
	var logs strings.Builder
	b := tokenBackend(t, srv.URL, true, slog.New(slog.NewTextHandler(&logs, nil)))
	for i := 0; i < 3; i++ {
		resp, err := b.Chat(context.Background(), tokenReq)
		require.NoError(t, err)
		assert.Nil(t, resp.Choices[0].Tokens)
		assert.Equal(t, "Hi", resp.Choices[0].Message.Content)
	}
	assert.True(t, b.TokensRefused())
	require.Len(t, ts.bodies, 4, "one refused request, then three without the fields")
	assert.Contains(t, ts.bodies[0], "return_token_ids")
	for _, body := range ts.bodies[1:] {
		assert.NotContains(t, body, "return_token_ids")
		assert.NotContains(t, body, "logprobs")
		assert.Equal(t, "20", string(body["top_k"]))
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "refused the token-id request fields"), logs.String())
}

// TestChatTokensRefusedConcurrent: calls sent with the fields at once
// (a rollout's plays in flight) are all refused before any of them learns
// of it; each asks again without them and none fails. (Once the first
// refusal was seen, the others used to fail with the server's 422.)
func TestChatTokensRefusedConcurrent(t *testing.T) {
	plain := strings.Replace(sglangTokenBody, `,"prompt_token_ids":[1,2,3,4],"token_ids":[13048]`, "", 1)
	plain = strings.Replace(plain, `{"content":[{"token":"Hi","bytes":[72,105],"logprob":-1.5,"top_logprobs":[]}]}`, "null", 1)
	const n = 8
	var mu sync.Mutex
	refused := 0
	all := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(string(raw), "return_token_ids") {
			mu.Lock()
			refused++
			if refused == n {
				close(all)
			}
			mu.Unlock()
			select { // every call is in flight with the fields before any answer
			case <-all:
			case <-time.After(3 * time.Second):
			}
			w.WriteHeader(http.StatusUnprocessableEntity)
			_, _ = io.WriteString(w, `{"detail":"Unexpected fields in the request: {'return_token_ids', 'return_prompt_token_ids', 'return_tokens_as_token_ids'}"}`)
			return
		}
		_, _ = io.WriteString(w, plain)
	}))
	t.Cleanup(srv.Close)
	b, err := New(Config{BaseURL: srv.URL + "/v1", Model: "m", APIKeyEnv: "SPADE_TEST_NO_KEY", Timeout: 5 * time.Second,
		MaxRetries: -1, ReturnTokens: true, Concurrency: n})
	require.NoError(t, err)
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			_, err := b.Chat(context.Background(), tokenReq)
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		assert.NoError(t, <-errs)
	}
	assert.Equal(t, n, refused, "every call was first sent with the fields")
	assert.True(t, b.TokensRefused())
}

// TestChoiceTokensMalformed: token information that does not decode is
// dropped field by field, never failing the call.
func TestChoiceTokensMalformed(t *testing.T) {
	for _, tc := range []struct {
		name, choice string
		want         *model.Tokens
	}{
		{"none", `{"index":0}`, nil},
		{"negative id", `{"token_ids":[1,-2]}`, nil},
		{"float id", `{"token_ids":[1.5]}`, nil},
		{"huge id", `{"token_ids":[99999999999]}`, nil},
		{"ids not a list", `{"token_ids":"1,2"}`, nil},
		{"positive logprob", `{"token_ids":[1],"logprobs":{"content":[{"token":"a","logprob":0.5}]}}`, &model.Tokens{CompletionIDs: []int64{1}}},
		{"null logprob", `{"logprobs":{"content":[{"token":"token_id:4","logprob":null}]}}`, &model.Tokens{CompletionIDs: []int64{4}}},
		{"text tokens only", `{"logprobs":{"content":[{"token":"a","logprob":-1}]}}`, &model.Tokens{Logprobs: []float64{-1}}},
		{"rounding", `{"token_ids":[7],"logprobs":{"content":[{"token":"a","logprob":1e-9}]}}`, &model.Tokens{CompletionIDs: []int64{7}, Logprobs: []float64{0}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, choiceTokens(`{}`, tc.choice))
		})
	}
	got := choiceTokens(`{"prompt_token_ids":[5,6]}`, `{"token_ids":[1]}`)
	assert.Equal(t, &model.Tokens{PromptIDs: []int64{5, 6}, CompletionIDs: []int64{1}}, got, "vLLM's top-level prompt ids")
}

package replay

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/modeltest"
	"github.com/spade-pipeline/spade/engines/model/openai"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func liveBackend(t *testing.T, opts ...modeltest.Option) (*openai.Backend, *modeltest.Server) {
	t.Helper()
	srv := modeltest.Start(t, opts...)
	b, err := openai.New(openai.Config{BaseURL: srv.URL, Model: "m1", APIKeyEnv: "SPADE_REPLAY_TEST_NO_KEY", Concurrency: 8, MaxRetries: -1})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b, srv
}

func agentRequest(i int) model.Request {
	return model.Request{
		Messages: []model.Message{
			{Role: model.RoleSystem, Content: "Play the game."},
			{Role: model.RoleUser, Content: "Total: 3. Target: 15.\nValid actions: add 1 | add 2 | add 3"},
		},
		Temperature: 1,
		Seed:        int64(i),
		Meta:        map[string]string{"spade.task": "agent", "spade.sample": strconv.Itoa(i)},
	}
}

func TestRecordThenReplayIsIdentical(t *testing.T) {
	live, srv := liveBackend(t)
	rec := NewRecorder(live)
	assert.Equal(t, "openai:m1", rec.Name())

	const n = 40
	liveResp := make([]model.Response, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := rec.Chat(context.Background(), agentRequest(i))
			assert.NoError(t, err)
			liveResp[i] = r
		}()
	}
	wg.Wait()
	calls := rec.Calls()
	require.Len(t, calls, n)
	for i := 1; i < n; i++ {
		require.Less(t, calls[i-1].RequestHash, calls[i].RequestHash, "calls sorted by hash, distinct requests")
	}
	for _, c := range calls {
		assert.Equal(t, int64(0), c.Occurrence)
		assert.Equal(t, "openai:m1", c.Backend)
		assert.Empty(t, c.Error)
		assert.NotEmpty(t, c.Response)
	}

	rp, err := NewReplayer(rec.Name(), calls)
	require.NoError(t, err)
	assert.Equal(t, rec.Name(), rp.Name())
	before := srv.Count()
	for i := n - 1; i >= 0; i-- { // any order
		got, err := rp.Chat(context.Background(), agentRequest(i))
		require.NoError(t, err)
		assert.Equal(t, liveResp[i], got)
	}
	assert.Equal(t, before, srv.Count(), "replay must not reach the server")
}

func TestIdenticalRequestsReplayInRecordedOrder(t *testing.T) {
	// The server answers by arrival index, so the two identical calls get
	// different answers; sequential replay must return them in order.
	live, _ := liveBackend(t, modeltest.WithHandler(func(req modeltest.Request) modeltest.Reply {
		return modeltest.Reply{Choices: []model.Choice{{Message: model.Message{Role: model.RoleAssistant, Content: fmt.Sprintf("answer %d", req.Index)}}}}
	}))
	rec := NewRecorder(live)
	req := agentRequest(7)
	var want []string
	for i := 0; i < 3; i++ {
		r, err := rec.Chat(context.Background(), req)
		require.NoError(t, err)
		want = append(want, r.Choices[0].Message.Content)
	}
	assert.Equal(t, []string{"answer 0", "answer 1", "answer 2"}, want)
	calls := rec.Calls()
	require.Len(t, calls, 3)
	for i, c := range calls {
		assert.Equal(t, int64(i), c.Occurrence)
		assert.Equal(t, calls[0].RequestHash, c.RequestHash)
	}

	// Feed the replayer shuffled rows, as a table scan might.
	shuffled := []Call{calls[2], calls[0], calls[1]}
	rp, err := NewReplayer(live.Name(), shuffled)
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		r, err := rp.Chat(context.Background(), req)
		require.NoError(t, err)
		assert.Equal(t, want[i], r.Choices[0].Message.Content)
	}
	_, err = rp.Chat(context.Background(), req)
	require.ErrorIs(t, err, ErrMiss)
	assert.Contains(t, err.Error(), "occurrence 3 (3 recorded)")
}

func TestReplayMissNamesHashAndExcerpt(t *testing.T) {
	rp, err := NewReplayer("openai:m1", nil)
	require.NoError(t, err)
	req := agentRequest(1)
	_, hash, err := Canonical("openai:m1", req)
	require.NoError(t, err)
	_, err = rp.Chat(context.Background(), req)
	require.ErrorIs(t, err, ErrMiss)
	assert.Contains(t, err.Error(), hash)
	assert.Contains(t, err.Error(), `"system: Play the game."`)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = rp.Chat(ctx, req)
	require.ErrorIs(t, err, context.Canceled)
}

// scripted is a model.Backend whose answers and latency a test controls;
// used where the property under test is the recorder, not a server.
type scripted struct {
	delay time.Duration
	fail  error
}

func (s scripted) Name() string { return "scripted:v1" }
func (s scripted) Chat(ctx context.Context, req model.Request) (model.Response, error) {
	time.Sleep(s.delay)
	if s.fail != nil {
		return model.Response{}, s.fail
	}
	return model.Response{Model: "x", Choices: []model.Choice{{Message: model.Message{Role: model.RoleAssistant, Content: "seed " + strconv.FormatInt(req.Seed, 10)}, FinishReason: "stop"}}}, nil
}

func TestLatencyDoesNotChangeReplayedData(t *testing.T) {
	record := func(delay time.Duration) []Call {
		rec := NewRecorder(scripted{delay: delay})
		for i := 0; i < 3; i++ {
			_, err := rec.Chat(context.Background(), agentRequest(i))
			require.NoError(t, err)
		}
		return rec.Calls()
	}
	fast, slow := record(0), record(30*time.Millisecond)
	for i := range fast {
		assert.GreaterOrEqual(t, slow[i].LatencyMS, int64(30))
		fast[i].LatencyMS, slow[i].LatencyMS = 0, 0
	}
	assert.Equal(t, fast, slow, "calls must differ only in latency_ms")
}

func TestRecordedFailureReplays(t *testing.T) {
	rec := NewRecorder(scripted{fail: errors.New("scripted: HTTP 400 Bad Request: nope")})
	_, err := rec.Chat(context.Background(), agentRequest(0))
	require.Error(t, err)
	calls := rec.Calls()
	require.Len(t, calls, 1)
	assert.Equal(t, "scripted: HTTP 400 Bad Request: nope", calls[0].Error)
	assert.Empty(t, calls[0].Response)

	rp, err := NewReplayer("scripted:v1", calls)
	require.NoError(t, err)
	_, err = rp.Chat(context.Background(), agentRequest(0))
	require.ErrorIs(t, err, ErrRecordedFailure)
	assert.Contains(t, err.Error(), "HTTP 400 Bad Request: nope")
}

func TestNewReplayerRejectsBadRows(t *testing.T) {
	rec := NewRecorder(scripted{})
	for i := 0; i < 2; i++ {
		_, err := rec.Chat(context.Background(), agentRequest(0))
		require.NoError(t, err)
	}
	good := rec.Calls()
	cases := []struct {
		name string
		mod  func([]Call) []Call
		want string
	}{
		{"tampered request", func(c []Call) []Call { c[0].Request += " "; return c }, "field request_hash does not match"},
		{"bad response", func(c []Call) []Call { c[1].Response = "{"; return c }, "call 1"},
		{"duplicate occurrence", func(c []Call) []Call { c[1].Occurrence = 0; return c }, "field occurrence is 0, want 1"},
		{"gap", func(c []Call) []Call { c[1].Occurrence = 5; return c }, "field occurrence is 5, want 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rows := tc.mod(append([]Call(nil), good...))
			_, err := NewReplayer("scripted:v1", rows)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestCanonicalHash(t *testing.T) {
	base := agentRequest(3)
	_, h0, err := Canonical("b", base)
	require.NoError(t, err)

	same := []struct {
		name string
		mod  func(*model.Request)
	}{
		{"N 0 is N 1", func(r *model.Request) { r.N = 1 }},
		{"empty tools", func(r *model.Request) { r.Tools = []model.Tool{} }},
		{"empty stop", func(r *model.Request) { r.Stop = []string{} }},
		{"meta copy", func(r *model.Request) { r.Meta = map[string]string{"spade.sample": "3", "spade.task": "agent"} }},
	}
	for _, tc := range same {
		t.Run(tc.name, func(t *testing.T) {
			r := agentRequest(3)
			tc.mod(&r)
			_, h, err := Canonical("b", r)
			require.NoError(t, err)
			assert.Equal(t, h0, h)
		})
	}
	differ := []struct {
		name    string
		backend string
		mod     func(*model.Request)
	}{
		{"backend", "c", func(*model.Request) {}},
		{"meta value", "b", func(r *model.Request) { r.Meta["spade.sample"] = "4" }},
		{"meta key", "b", func(r *model.Request) { r.Meta["spade.attempt"] = "1" }},
		{"temperature", "b", func(r *model.Request) { r.Temperature = 0.99 }},
		{"seed", "b", func(r *model.Request) { r.Seed = 4 }},
		{"max tokens", "b", func(r *model.Request) { r.MaxTokens = 10 }},
		{"message", "b", func(r *model.Request) { r.Messages[1].Content += "." }},
		{"tool", "b", func(r *model.Request) { r.Tools = []model.Tool{{Name: "f"}} }},
	}
	for _, tc := range differ {
		t.Run(tc.name, func(t *testing.T) {
			r := agentRequest(3)
			tc.mod(&r)
			_, h, err := Canonical(tc.backend, r)
			require.NoError(t, err)
			assert.NotEqual(t, h0, h)
		})
	}
}

func TestCanonicalGolden(t *testing.T) {
	req := model.Request{
		Messages: []model.Message{
			{Role: model.RoleSystem, Content: "sys"},
			{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "c1", Name: "f", Arguments: `{"a":1}`}}},
			{Role: model.RoleTool, ToolCallID: "c1", Content: "ok"},
		},
		Tools:       []model.Tool{{Name: "f", Description: "d", Parameters: `{"type":"object"}`}},
		N:           2,
		Temperature: 0.6,
		TopP:        0.95,
		MaxTokens:   128,
		Seed:        -5,
		Stop:        []string{"</s>"},
		Meta:        map[string]string{"z": "last", "a": "first"},
	}
	js, hash, err := Canonical("openai:qwen3-8b", req)
	require.NoError(t, err)
	got := js + "\n" + hash + "\n"
	path := filepath.Join("testdata", "canonical.golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run with -update to create %s", path)
	assert.Equal(t, string(want), got, "canonical form changed: every recorded llm_calls table would stop replaying")
}

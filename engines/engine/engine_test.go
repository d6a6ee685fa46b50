package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/modeltest"
	"github.com/spade-pipeline/spade/engines/sandbox"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
)

// TestMaxRetries: model.max_retries counts retries after the first attempt,
// and 0 means none (the openai backend's own zero value means its default).
func TestMaxRetries(t *testing.T) {
	for _, retries := range []int{0, 2} {
		fail := modeltest.Fault{Kind: modeltest.FaultServerError}
		srv := modeltest.Start(t, modeltest.WithFaultSequence(fail, fail, fail, fail, fail, fail, fail))
		cfg := config.Default()
		cfg.Model.Backend, cfg.Model.BaseURL, cfg.Model.Name = "openai", srv.URL, "m"
		cfg.Model.APIKeyEnv, cfg.Model.MaxRetries = "", retries
		b, err := (&Engines{Config: &cfg}).Backend()
		require.NoError(t, err)
		_, err = b.Chat(context.Background(), model.Request{Messages: []model.Message{{Role: "user", Content: "hi"}}})
		require.Error(t, err)
		require.Len(t, srv.Requests(), retries+1, "max_retries %d", retries)
	}
}

// TestOutage: after model.unavailable_after transient failures in a row
// and a probe the server does not answer, the stage model stops calling
// the server and fails the stage; when the server answers the probe the
// count starts again (the failures were those requests' own) and there is
// no early stop; a stage part whose every call failed transiently fails
// even without the early stop; an answer (even a 400) in between resets
// the count, and such a part commits with its errors on the rows.
func TestOutage(t *testing.T) {
	fail := modeltest.Fault{Kind: modeltest.FaultServerError}
	bad := modeltest.Fault{Kind: modeltest.FaultBadRequest, Message: "too long"}
	req := model.Request{Messages: []model.Message{{Role: "user", Content: "hi"}}}
	for _, tc := range []struct {
		name    string
		after   int
		seq     []modeltest.Fault // first answers; later ones are 500s too when allFail
		allFail bool
		calls   int
		reached int    // requests the server saw
		err     string // "" when the stage may commit
		probe   error  // what the probe answers (nil: the server's own /models, which answers)
	}{
		{"early stop", 3, nil, true, 6, 3, "3 calls in a row failed after their retries (model.unavailable_after) and the server does not answer (probe refused)", errors.New("probe refused")},
		{"the server answers the probe: no early stop", 3, nil, true, 7, 7, "all 7 calls of the stage part failed", nil},
		{"no early stop, all failed", 0, nil, true, 5, 5, "all 5 calls of the stage part failed", nil},
		{"an answer resets the run", 3, []modeltest.Fault{fail, fail, bad, fail, fail, {}}, false, 6, 6, "", nil},
		{"a probe answered resets the run", 2, []modeltest.Fault{fail, fail, fail, {}}, false, 4, 4, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := []modeltest.Option{modeltest.WithFaultSequence(tc.seq...)}
			if tc.allFail {
				opts = []modeltest.Option{modeltest.WithFaultShare(fail, 1, 1)}
			}
			srv := modeltest.Start(t, opts...)
			cfg := config.Default()
			cfg.Model.Backend, cfg.Model.BaseURL, cfg.Model.Name = "openai", srv.URL, "m"
			cfg.Model.APIKeyEnv, cfg.Model.MaxRetries, cfg.Model.UnavailableAfter = "", 0, tc.after
			sm, err := (&Engines{Config: &cfg}).ForStage(context.Background(), "design", 1)
			require.NoError(t, err)
			require.NotNil(t, sm.probe, "the openai backend can be probed")
			if tc.probe != nil {
				sm.probe = func(context.Context) error { return tc.probe }
			}
			var errs []error
			for range tc.calls {
				_, err := sm.Chat(context.Background(), req)
				errs = append(errs, err)
			}
			require.Len(t, srv.Requests(), tc.reached, "requests that reached the server")
			if tc.err == "" {
				require.NoError(t, sm.Err(context.Background()))
				require.False(t, errors.Is(errs[len(errs)-2], model.ErrUnavailable))
				require.NoError(t, errs[len(errs)-1], "the last call was answered")
				return
			}
			require.ErrorIs(t, sm.Err(context.Background()), model.ErrUnavailable)
			require.ErrorContains(t, sm.Err(context.Background()), tc.err)
			require.ErrorContains(t, sm.Err(context.Background()), "HTTP 500")
			if tc.probe != nil {
				require.ErrorIs(t, errs[len(errs)-1], model.ErrUnavailable, "calls after the early stop fail at once")
			} else {
				require.False(t, errors.Is(errs[len(errs)-1], model.ErrUnavailable), "no early stop while the server answers its probe")
			}
		})
	}
}

// TestOutageAtTheEnd: a part that ends on transient failures fails when
// the server no longer answers a probe (it went down near the end of the
// part), and commits with the errors on its rows when the server answers
// (the failures were flaky).
func TestOutageAtTheEnd(t *testing.T) {
	fail := modeltest.Fault{Kind: modeltest.FaultServerError}
	req := model.Request{Messages: []model.Message{{Role: "user", Content: "hi"}}}
	for _, gone := range []bool{false, true} {
		t.Run(fmt.Sprintf("server gone=%v", gone), func(t *testing.T) {
			srv := modeltest.Start(t, modeltest.WithFaultSequence(modeltest.Fault{}, modeltest.Fault{}, fail, fail))
			cfg := config.Default()
			cfg.Model.Backend, cfg.Model.BaseURL, cfg.Model.Name = "openai", srv.URL, "m"
			cfg.Model.APIKeyEnv, cfg.Model.MaxRetries = "", 0
			sm, err := (&Engines{Config: &cfg}).ForStage(context.Background(), "rollout", 1)
			require.NoError(t, err)
			for i := range 4 {
				_, err := sm.Chat(context.Background(), req)
				require.Equal(t, i >= 2, err != nil, "call %d: %v", i, err)
			}
			if !gone {
				require.NoError(t, sm.Err(context.Background()), "the server answers the probe: flaky failures, the part commits")
				return
			}
			srv.Close()
			err = sm.Err(context.Background())
			require.ErrorIs(t, err, model.ErrUnavailable)
			require.ErrorContains(t, err, "ended on 2 failed calls in a row and the server does not answer")
		})
	}
}

// TestOutageOneCall: a part of one call that failed transiently commits
// with the error on its row while the server answers the probe (a prompt
// it cannot answer in time would otherwise fail the stage on every
// rerun), and fails when the server does not answer.
func TestOutageOneCall(t *testing.T) {
	req := model.Request{Messages: []model.Message{{Role: "user", Content: "hi"}}}
	for _, gone := range []bool{false, true} {
		t.Run(fmt.Sprintf("server gone=%v", gone), func(t *testing.T) {
			srv := modeltest.Start(t, modeltest.WithFaultSequence(modeltest.Fault{Kind: modeltest.FaultServerError}))
			cfg := config.Default()
			cfg.Model.Backend, cfg.Model.BaseURL, cfg.Model.Name = "openai", srv.URL, "m"
			cfg.Model.APIKeyEnv, cfg.Model.MaxRetries = "", 0
			sm, err := (&Engines{Config: &cfg}).ForStage(context.Background(), "hint", 1)
			require.NoError(t, err)
			_, err = sm.Chat(context.Background(), req)
			require.ErrorContains(t, err, "HTTP 500")
			if !gone {
				require.NoError(t, sm.Err(context.Background()), "the server answers the probe: the failure goes on the row")
				return
			}
			srv.Close()
			require.ErrorIs(t, sm.Err(context.Background()), model.ErrUnavailable)
		})
	}
}

// TestOutageTimedOut: a part whose every call (two or more) timed out
// fails, and the error names model.timeout_s, an operational setting the
// rerun may raise: prompts the server cannot answer in time would
// otherwise fail the same way on every rerun.
func TestOutageTimedOut(t *testing.T) {
	srv := modeltest.Start(t, modeltest.WithFaultShare(modeltest.Fault{Kind: modeltest.FaultHang}, 1, 1))
	cfg := config.Default()
	cfg.Model.Backend, cfg.Model.BaseURL, cfg.Model.Name = "openai", srv.URL, "m"
	cfg.Model.APIKeyEnv, cfg.Model.MaxRetries, cfg.Model.TimeoutS = "", 0, 0.05
	sm, err := (&Engines{Config: &cfg}).ForStage(context.Background(), "hint", 1)
	require.NoError(t, err)
	req := model.Request{Messages: []model.Message{{Role: "user", Content: "hi"}}}
	for range 2 {
		_, err := sm.Chat(context.Background(), req)
		require.ErrorIs(t, err, model.ErrTimeout)
	}
	err = sm.Err(context.Background())
	require.ErrorIs(t, err, model.ErrUnavailable)
	require.ErrorContains(t, err, "all 2 calls of the stage part failed")
	require.ErrorContains(t, err, "raise model.timeout_s, now 50ms, before the rerun")
}

// TestCheckConfigReplayName: a model.replay that is not a run name is a
// configuration error before anything runs; it used to pass every check
// and fail the design stage (an invalid store key) after the corpus and
// sample stages had committed.
func TestCheckConfigReplayName(t *testing.T) {
	for _, bad := range []string{"../base", "a/b", ".hidden", "-x"} {
		cfg := config.Default()
		cfg.Model.Replay = bad
		err := CheckConfig(&cfg)
		require.ErrorContains(t, err, "invalid configuration: model.replay: invalid run name", bad)
	}
	cfg := config.Default()
	cfg.Model.Replay = "base.v2"
	require.NoError(t, CheckConfig(&cfg))
}

// TestCheckConfigWorkers: as root, more workers than the sandbox has uids
// per process is refused before anything runs; it used to fail the design
// stage (exit 1) once the corpus and sample stages had committed.
func TestCheckConfigWorkers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the limit applies as root only")
	}
	cfg := config.Default()
	cfg.Workers = sandbox.UIDStride + 1
	require.ErrorContains(t, CheckConfig(&cfg), fmt.Sprintf("invalid configuration: workers must be <= %d when spade runs as root", sandbox.UIDStride))
	cfg.Workers = sandbox.UIDStride
	require.NoError(t, CheckConfig(&cfg))
	cfg.Workers = 0
	require.LessOrEqual(t, (&Engines{Config: &cfg}).Workers(), sandbox.UIDStride)
}

// TestServeKeepsRequestSettings: the backend a served stage calls through
// (Serve's session, here fixed serving) sends model.extra_body,
// model.tool_choice and the token-id fields of model.token_ids, as the
// unserved backend does; Serve once built it without them, so with any
// model.serving the extra fields never reached the server.
func TestServeKeepsRequestSettings(t *testing.T) {
	srv := modeltest.Start(t)
	cfg := config.Default()
	cfg.Model.Backend, cfg.Model.BaseURL, cfg.Model.Name, cfg.Model.APIKeyEnv = "openai", srv.URL, "m", ""
	cfg.Model.Serving, cfg.Model.ExtraBody, cfg.Model.ToolChoice, cfg.Model.TokenIDs = "fixed", `{"top_k": 20}`, "required", "on"
	e := &Engines{Config: &cfg}
	env := &pipeline.Env{Config: &cfg, Round: pipeline.RoundInfo{Run: "t", Round: 1, Seed: 7}}
	stop, err := e.Serve(context.Background(), env, "rollout")
	require.NoError(t, err)
	defer stop()
	sm, err := e.ForStage(context.Background(), "rollout", 1)
	require.NoError(t, err)
	_, err = sm.Chat(context.Background(), model.Request{Messages: []model.Message{{Role: "user", Content: "hi"}}, Tools: []model.Tool{{Name: "f"}}})
	require.NoError(t, err)
	reqs := srv.Requests()
	require.Len(t, reqs, 1)
	for _, k := range []string{"top_k", "tool_choice", "logprobs", "return_token_ids"} {
		require.Contains(t, reqs[0].Keys, k)
	}
}

package rollout_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/modeltest"
	"github.com/spade-pipeline/spade/internal/pyenv"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/schemas"
)

// serveModel starts `transformers serve` on a free loopback port for the
// model checkpoint dir, waits until it answers GET /v1/models, and kills
// its process group when the test ends. It returns the API root.
// (docs/models.md: a user's own server is model.serving fixed.)
func serveModel(t *testing.T, dir string) string {
	t.Helper()
	pyenv.Require(t, "transformers")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	cmd := exec.Command(filepath.Join(pyenv.Venv(), "bin", "transformers"), "serve", dir, "--host", "127.0.0.1", "--port", fmt.Sprint(port))
	cmd.Env = append(os.Environ(), "HF_HUB_OFFLINE=1", "HF_HUB_CACHE="+t.TempDir(), "TRANSFORMERS_VERBOSITY=error", "OMP_NUM_THREADS=1")
	var logBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	base := fmt.Sprintf("http://127.0.0.1:%d/v1", port)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		resp, err := http.Get(base + "/models")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("transformers serve did not answer on %s within 3 minutes:\n%s", base, logBuf.String())
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// roleProxy is one OpenAI-compatible endpoint in front of two servers: the
// agent's calls go to agentURL (the real model), the designer's and hint
// writer's to designURL, bodies and answers passed through unchanged.
func roleProxy(t *testing.T, agentURL, designURL string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			Messages []model.Message `json:"messages"`
		}
		_ = json.Unmarshal(body, &req)
		target := designURL
		if modeltest.Classify(model.Request{Messages: req.Messages}) == modeltest.RoleAgent {
			target = agentURL
		}
		out, err := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.Path[len("/v1"):], bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		out.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(out)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/v1"
}

// TestRealModelRound plays round 1 with SmolLM2-135M-Instruct as the agent
// (served by `transformers serve` on CPU, model.serving fixed): its
// free-form replies are recorded raw, actions are extracted under
// valid_actions, and every stepped action is either a listed action or,
// counted in unextracted, the reply itself. The designer and the hint
// writer are the test server (a 135M model writes no valid environment).
func TestRealModelRound(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real model server")
	}
	dir := pyenv.RequireModel(t, "smollm2-135m-instruct")
	real := serveModel(t, dir)
	fake := modeltest.Start(t, modeltest.WithoutRecording())
	proxy := roleProxy(t, real, fake.URL)
	st, run := protocolRound(t, "protocol-real", proxy, func(c *config.Config) {
		c.Sample.Slots, c.Rollout.GroupSize, c.Rollout.MaxTurns = 1, 1, 2
		c.Rollout.MaxTokens, c.Rollout.Temperature = 64, 0
		c.Model.Name, c.Model.Concurrency, c.Model.TimeoutS = dir, 1, 600
	})
	plays := table[schemas.Rollout](t, st, run, "rollouts")
	require.Len(t, plays, 2, "one environment, one unhinted and one hinted play")
	listed := []string{"add 1", "add 2", "add 3"}
	replies, extracted := 0, 0
	for _, p := range plays {
		require.NotEmpty(t, p.Replies, "play %v: %s", p.Hinted, p.Error)
		replies += len(p.Replies)
		require.Len(t, p.FinishReasons, len(p.Replies))
		if p.Error != "" {
			require.Equal(t, "agent_cut", p.Termination, "the only failure a real small model causes here is a cut reply: %s", p.Error)
		}
		unextracted := 0
		for i, a := range p.Actions {
			if contains(listed, a) {
				extracted++
			} else {
				unextracted++
				_, answer := model.SplitThink(p.Replies[i])
				require.Equal(t, answer, a, "an unextractable reply is stepped as it is")
			}
		}
		require.EqualValues(t, unextracted, p.Unextracted)
	}
	calls := table[schemas.LLMCall](t, st, run, "rollout_calls")
	require.Len(t, calls, replies)
	for _, c := range calls {
		var resp model.Response
		require.NoError(t, json.Unmarshal([]byte(c.Response), &resp), c.Error)
		require.Contains(t, resp.Model, "smollm2-135m-instruct", "the agent's replies come from the real model")
	}
	t.Logf("%d replies of the real model, %d actions extracted from them", replies, extracted)
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

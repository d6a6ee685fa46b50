package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/model/modeltest"
	"github.com/spade-pipeline/spade/engines/model/serving"
	"github.com/spade-pipeline/spade/internal/pyenv"
)

// writeConfig writes a spade.yaml into dir and returns its path.
func writeConfig(t *testing.T, dir, text string) string {
	t.Helper()
	p := filepath.Join(dir, "spade.yaml")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	return p
}

// fakeCheckpoint is a directory that passes the base-checkpoint check.
func fakeCheckpoint(t *testing.T) string {
	dir := filepath.Join(t.TempDir(), "base")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type":"llama"}`), 0o644))
	return dir
}

// sqlCSV runs query on the default run and returns its CSV rows.
func sqlCSV(t *testing.T, dir, cfg, query string) string {
	t.Helper()
	return sqlCSVRun(t, dir, cfg, "default", query)
}

// sqlCSVRun runs query on the named run and returns its CSV rows.
func sqlCSVRun(t *testing.T, dir, cfg, run, query string) string {
	t.Helper()
	r := spade(t, dir, nil, "--config", cfg, "--run", run, "sql", "--format", "csv", query)
	require.Equal(t, 0, r.code, r.stderr)
	_, rows, _ := strings.Cut(strings.TrimSpace(r.stdout), "\n") // after the header
	return strings.TrimSpace(rows)
}

// staleVLLM is a vLLM server with --enable-lora whose adapter never takes
// effect: /v1/load_lora_adapter and /v1/models speak vLLM's wire format
// (the adapter is listed), but chat completions are answered by the base
// model (modeltest, reporting the base name), as a server still on the
// previous weights would.
func staleVLLM(t *testing.T) string {
	base := "Qwen/Qwen3-8B"
	up := modeltest.Start(t, modeltest.WithModel(base))
	target, err := url.Parse(strings.TrimSuffix(up.URL, "/v1"))
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	var loras []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/v1/load_lora_adapter":
			var req struct {
				Name string `json:"lora_name"`
			}
			_ = json.NewDecoder(r.Body).Decode(&req)
			loras = append(loras, req.Name)
			fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", req.Name)
		case "/v1/models":
			data := []string{fmt.Sprintf(`{"id":%q,"object":"model","owned_by":"vllm","root":%q,"parent":null}`, base, base)}
			for _, l := range loras {
				data = append(data, fmt.Sprintf(`{"id":%q,"object":"model","owned_by":"vllm","root":"/x","parent":%q}`, l, base))
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"object":"list","data":[%s]}`, strings.Join(data, ","))
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// TestServingStalePolicy: a reload server that answers with another model
// than the round's policy fails those calls with a stale-policy error on
// their rows; the round commits, and its metrics say it was not on-policy.
func TestServingStalePolicy(t *testing.T) {
	dir := t.TempDir()
	base := fakeCheckpoint(t)
	cfg := writeConfig(t, dir, fmt.Sprintf(`seed: 3
workers: 2
sample: {slots: 2}
design: {slots_per_part: 2}
rollout: {group_size: 1, max_turns: 2, envs_per_part: 2}
model:
  backend: openai
  base_url: %s
  name: Qwen/Qwen3-8B
  serving: reload
  reload: {preset: vllm-lora}
  max_retries: 0
  roles:
    designer: {backend: procedural}
    hint: {backend: procedural}
grpo: {base_checkpoint: %s}
`, staleVLLM(t), base))
	r := spade(t, dir, nil, "--config", cfg, "round", "1")
	require.Equal(t, 0, r.code, r.stderr)
	id := "base:" + base
	require.Equal(t, id, sqlCSV(t, dir, cfg, "select string_agg(distinct checkpoint_id, ',') from rollout_calls")+"", "calls name the policy asked for")
	errs := sqlCSV(t, dir, cfg, "select count(*) filter (where error like '%stale policy%' and error like '%Qwen/Qwen3-8B%'), count(*) from rollout_calls")
	n := strings.Split(errs, ",")
	require.Len(t, n, 2)
	require.Equal(t, n[0], n[1], "every agent call failed as stale: %s", errs)
	require.NotEqual(t, "0", n[1])
	require.Equal(t, "0", sqlCSV(t, dir, cfg, "select count(*) from rollouts where error not like '%stale policy%'"), "every play records the stale policy")
	require.Equal(t, "0", sqlCSV(t, dir, cfg, "select value from metrics where name = 'on_policy'"))
	require.Equal(t, "procedural", sqlCSV(t, dir, cfg, "select string_agg(distinct checkpoint_id, ',') from designs"))
}

// TestServingDeadBaseURL: with nothing listening at model.base_url the
// stage fails in seconds (one GET /v1/models), naming the URL.
func TestServingDeadBaseURL(t *testing.T) {
	dir := t.TempDir()
	port, err := serving.FreePort()
	require.NoError(t, err)
	cfg := writeConfig(t, dir, fmt.Sprintf(`sample: {slots: 2}
rollout: {group_size: 1}
model: {backend: openai, base_url: "http://127.0.0.1:%d/v1", name: m}
`, port))
	start := time.Now()
	r := spade(t, dir, nil, "--config", cfg, "round", "1")
	took := time.Since(start)
	require.Equal(t, 1, r.code, r.stderr)
	require.Less(t, took, 15*time.Second)
	require.Contains(t, r.stderr, fmt.Sprintf("http://127.0.0.1:%d/v1", port))
	require.Contains(t, r.stderr, "does not answer")
	require.Contains(t, r.stderr, "stage design: serve the round's policy")
	t.Logf("failed after %v: %s", took, lastLine(r.stderr))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestServingEarlyChecks: a missing base checkpoint, and a trainer with a
// fixed server not chosen explicitly, are refused before any stage runs
// (exit 2, no run created).
func TestServingEarlyChecks(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "grpo: {trainer: command, command: [/bin/true], base_checkpoint: /models/qwen3-8b}\n")
	start := time.Now()
	r := spade(t, dir, nil, "--config", cfg, "round", "1")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "grpo.base_checkpoint /models/qwen3-8b")
	require.Less(t, time.Since(start), 15*time.Second)
	_, err := os.Stat(filepath.Join(dir, "runs", "default", "_RUN.json"))
	require.True(t, os.IsNotExist(err), "no stage ran, no run was created")

	cfg = writeConfig(t, dir, "model: {backend: openai, base_url: 'http://127.0.0.1:8000/v1', name: m}\ngrpo: {trainer: command, command: [/bin/true]}\n")
	r = spade(t, dir, nil, "--config", cfg, "round", "1")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "model.serving")
	require.Contains(t, r.stderr, "fixed")
}

// serveYAML is the model.* serving block for the real transformers serve:
// it has no --served-model-name and answers only to the path it serves,
// hence served_model_name "{checkpoint}" (docs/serving.md).
func serveYAML(t *testing.T, cache string) string {
	tr := filepath.Join(pyenv.Venv(), "bin", "transformers")
	hub := t.TempDir()
	return fmt.Sprintf(`  serving: managed
  serve_command: [env, HF_HUB_OFFLINE=1, "HF_HUB_CACHE=%s", %s, serve, "{checkpoint}", --host, 127.0.0.1, --port, "{port}"]
  served_model_name: "{checkpoint}"
  serve_ready_timeout_s: 300
  checkpoint_cache: %s
`, hub, tr, cache)
}

var startedRE = regexp.MustCompile(`model server started.* pid=(\d+)`)

// TestServingManagedKill: SIGKILL of spade while its managed server
// (the real transformers serve over SmolLM2) serves the rollout stage
// leaves no server process; the rerun resumes and commits the round, every
// agent call answered by the round's policy.
func TestServingManagedKill(t *testing.T) {
	pyenv.Require(t)
	ckpt := pyenv.RequireModel(t, "smollm2-135m-instruct")
	dir := t.TempDir()
	cfg := writeConfig(t, dir, fmt.Sprintf(`seed: 5
workers: 1
sample: {slots: 1}
design: {slots_per_part: 1}
rollout: {group_size: 1, max_turns: 1, temperature: 0, max_tokens: 24}
model:
  backend: openai
  roles:
    designer: {backend: procedural}
    hint: {backend: procedural}
%sgrpo: {base_checkpoint: %s}
`, serveYAML(t, filepath.Join(t.TempDir(), "cache")), ckpt))
	cmd := exec.Command(spadeBin, "--config", cfg, "--log-level", "info", "round", "1")
	cmd.Dir = dir
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	pid := 0
	sc := bufio.NewScanner(stderr)
	var seen []string
	for sc.Scan() {
		seen = append(seen, sc.Text())
		if m := startedRE.FindStringSubmatch(sc.Text()); m != nil {
			pid, _ = strconv.Atoi(m[1])
			break
		}
	}
	require.NotZero(t, pid, "spade logged no server start: %s", strings.Join(seen, "\n"))
	go io.Copy(io.Discard, stderr)
	require.NoError(t, syscall.Kill(pid, 0), "the server runs")
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	require.Eventually(t, func() bool { return errors.Is(syscall.Kill(-pid, 0), syscall.ESRCH) }, 15*time.Second, 50*time.Millisecond,
		"no process of the server's group outlives spade")

	r := spade(t, dir, nil, "--config", cfg, "round", "1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "base:"+ckpt, sqlCSV(t, dir, cfg, "select string_agg(distinct checkpoint_id, ',') from rollout_calls"))
	require.Equal(t, "0", sqlCSV(t, dir, cfg, "select count(*) from rollout_calls where error <> ''"))
	require.Equal(t, "1", sqlCSV(t, dir, cfg, "select value from metrics where name = 'on_policy'"))
}

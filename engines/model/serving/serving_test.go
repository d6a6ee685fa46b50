package serving_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/serving"
	"github.com/spade-pipeline/spade/internal/pyenv"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage/memstore"
	"github.com/spade-pipeline/spade/schemas"
)

func storedCheckpoint(t *testing.T, files map[string]string) (*memstore.Store, schemas.Checkpoint) {
	t.Helper()
	st := memstore.New("t")
	ck := schemas.Checkpoint{CheckpointID: "0123456789abcdef", TrainedRound: 1, Trainer: "torch"}
	for _, name := range []string{"config.json", "model.safetensors", "sub/tokenizer.json"} {
		data, ok := files[name]
		if !ok {
			continue
		}
		sum := sha256.Sum256([]byte(data))
		key := "run/round=000001/checkpoints/files/" + ck.CheckpointID + "/" + name
		require.NoError(t, st.Put(context.Background(), key, strings.NewReader(data), int64(len(data))))
		ck.Files = append(ck.Files, schemas.CheckpointFile{Name: name, Key: key, SHA256: hex.EncodeToString(sum[:]), Bytes: int64(len(data))})
	}
	return st, ck
}

func TestMaterialize(t *testing.T) {
	ctx := context.Background()
	files := map[string]string{"config.json": `{"model_type":"llama"}`, "model.safetensors": "weights", "sub/tokenizer.json": "{}"}
	st, ck := storedCheckpoint(t, files)
	cache := t.TempDir()

	dir, err := serving.Materialize(ctx, st, ck, cache)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(cache, ck.CheckpointID), dir, "the directory is named by the checkpoint id")
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		require.Equal(t, want, string(got))
	}
	left, _ := filepath.Glob(filepath.Join(cache, ".tmp-*"))
	require.Empty(t, left, "no temporary directory is left")

	t.Run("reused", func(t *testing.T) {
		fi, err := os.Stat(filepath.Join(dir, "model.safetensors"))
		require.NoError(t, err)
		again, err := serving.Materialize(ctx, st, ck, cache)
		require.NoError(t, err)
		fi2, err := os.Stat(filepath.Join(again, "model.safetensors"))
		require.NoError(t, err)
		require.Equal(t, fi.ModTime(), fi2.ModTime(), "a whole cached checkpoint is not rewritten")
	})
	t.Run("a file cut short is replaced", func(t *testing.T) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("w"), 0o644))
		again, err := serving.Materialize(ctx, st, ck, cache)
		require.NoError(t, err)
		got, err := os.ReadFile(filepath.Join(again, "model.safetensors"))
		require.NoError(t, err)
		require.Equal(t, "weights", string(got))
	})
	t.Run("a damaged store file is refused", func(t *testing.T) {
		bad := ck
		bad.CheckpointID = "fedcba9876543210"
		bad.Files = append([]schemas.CheckpointFile(nil), ck.Files...)
		require.NoError(t, st.Put(ctx, bad.Files[1].Key, strings.NewReader("weightz"), 7))
		_, err := serving.Materialize(ctx, st, bad, cache)
		require.ErrorIs(t, err, pipeline.ErrIntegrity)
		require.ErrorContains(t, err, bad.CheckpointID)
		_, serr := os.Stat(filepath.Join(cache, bad.CheckpointID))
		require.True(t, os.IsNotExist(serr), "nothing is installed under the id")
		left, _ := filepath.Glob(filepath.Join(cache, ".tmp-*"))
		require.Empty(t, left)
	})
	t.Run("unsafe names", func(t *testing.T) {
		for _, name := range []string{"../x", "/etc/passwd", ".", ".spade-checkpoint.json"} {
			bad := ck
			bad.Files = []schemas.CheckpointFile{{Name: name, Key: ck.Files[0].Key, SHA256: ck.Files[0].SHA256, Bytes: ck.Files[0].Bytes}}
			_, err := serving.Materialize(ctx, st, bad, cache)
			require.ErrorContains(t, err, "file name", name)
		}
	})
}

// fakeSGLang speaks SGLang's native and OpenAI wire format for what
// spade uses: GET /v1/models lists --served-model-name (fixed at launch),
// POST /update_weights_from_disk loads a path ({"success": bool,
// "message": ...}), GET /get_model_info reports model_path.
type fakeSGLang struct {
	mu       sync.Mutex
	served   string
	path     string
	failLoad bool
}

func (f *fakeSGLang) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/v1/models":
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","created":1796160000,"owned_by":"sglang","root":%q,"max_model_len":32768}]}`, f.served, f.path)
	case "/get_model_info":
		fmt.Fprintf(w, `{"model_path":%q,"tokenizer_path":%q,"is_generation":true,"preferred_sampling_params":null,"weight_version":"default"}`, f.path, f.path)
	case "/update_weights_from_disk":
		var req struct {
			ModelPath string `json:"model_path"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.Method != http.MethodPost {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if f.failLoad {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"success":false,"message":"Failed to get weights iterator: %s (repository not found)."}`, req.ModelPath)
			return
		}
		f.path = req.ModelPath
		fmt.Fprint(w, `{"success":true,"message":"Succeeded to update model weights.","num_paused_requests":0}`)
	default:
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"detail":"Not Found"}`)
	}
}

// fakeVLLM speaks vLLM's LoRA wire format: POST /v1/load_lora_adapter
// answers plain text on success and an OpenAI error object otherwise, and
// GET /v1/models lists the base model and each adapter (with "parent").
type fakeVLLM struct {
	mu    sync.Mutex
	base  string
	loras []string
}

func (f *fakeVLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.URL.Path {
	case "/v1/models":
		var data []string
		data = append(data, fmt.Sprintf(`{"id":%q,"object":"model","owned_by":"vllm","root":%q,"parent":null}`, f.base, f.base))
		for _, l := range f.loras {
			data = append(data, fmt.Sprintf(`{"id":%q,"object":"model","owned_by":"vllm","root":"/cache/%s","parent":%q}`, l, l, f.base))
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"object":"list","data":[%s]}`, strings.Join(data, ","))
	case "/v1/load_lora_adapter":
		var req struct {
			Name string `json:"lora_name"`
			Path string `json:"lora_path"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		for _, l := range f.loras {
			if l == req.Name {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				fmt.Fprintf(w, `{"object":"error","message":"The lora adapter '%s' has already been loaded.","type":"InvalidUserInput","param":null,"code":400}`, req.Name)
				return
			}
		}
		f.loras = append(f.loras, req.Name)
		fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", req.Name)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func TestReloadSGLang(t *testing.T) {
	ctx := context.Background()
	f := &fakeSGLang{served: "policy", path: "/models/base"}
	srv := httptest.NewServer(f)
	defer srv.Close()
	base := srv.URL + "/v1"
	rr := serving.ReloadFor(config.Reload{Preset: "sglang"})
	ph := serving.Placeholders{Checkpoint: "/cache/0123456789abcdef", ServedModel: "0123456789abcdef"}
	require.NoError(t, serving.Reload(ctx, srv.Client(), base, "", rr, ph))
	got, err := serving.ModelPath(ctx, srv.Client(), base)
	require.NoError(t, err)
	require.Equal(t, ph.Checkpoint, got, "the engine reports the loaded path")
	require.NoError(t, serving.Check(ctx, srv.Client(), base, "policy"), "SGLang keeps its launch name")

	f.failLoad = true
	err = serving.Reload(ctx, srv.Client(), base, "", rr, serving.Placeholders{Checkpoint: "/nope"})
	require.ErrorContains(t, err, "HTTP 400")
	require.ErrorContains(t, err, "/nope")
}

func TestReloadVLLMLoRA(t *testing.T) {
	ctx := context.Background()
	f := &fakeVLLM{base: "Qwen/Qwen3-8B"}
	srv := httptest.NewServer(f)
	defer srv.Close()
	base := srv.URL + "/v1"
	rr := serving.ReloadFor(config.Reload{Preset: "vllm-lora"})
	ph := serving.Placeholders{Checkpoint: "/cache/0123456789abcdef", ServedModel: "0123456789abcdef"}

	err := serving.Check(ctx, srv.Client(), base, ph.ServedModel)
	require.ErrorIs(t, err, model.ErrStalePolicy, "before the load the adapter is not served")
	require.ErrorContains(t, err, "Qwen/Qwen3-8B")

	require.NoError(t, serving.Reload(ctx, srv.Client(), base, "", rr, ph))
	require.NoError(t, serving.Check(ctx, srv.Client(), base, ph.ServedModel))
	err = serving.Reload(ctx, srv.Client(), base, "", rr, ph)
	require.ErrorContains(t, err, "already been loaded")
}

func TestPlaceholders(t *testing.T) {
	p := serving.Placeholders{Checkpoint: `/c/a"b`, Port: 8001, ServedModel: "id"}
	require.Equal(t, `--model=/c/a"b --port 8001 id`, p.Expand("--model={checkpoint} --port {port} {served_model}", false))
	body := p.Expand(`{"model_path": "{checkpoint}"}`, true)
	require.True(t, json.Valid([]byte(body)), body)
}

func TestSameServedModel(t *testing.T) {
	require.True(t, model.SameServedModel("abc", "abc"))
	require.True(t, model.SameServedModel("/c/abc@main", "/c/abc"), "transformers serve appends @revision")
	require.False(t, model.SameServedModel("/c/abd@main", "/c/abc"))
	require.False(t, model.SameServedModel("abc@x/y", "abc"))
	require.False(t, model.SameServedModel("ab", "abc"))
}

// TestStopKillsGroup: Stop ends the whole process group, children
// included, and the log holds their output.
func TestStopKillsGroup(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "logs", "s.log")
	pidFile := filepath.Join(t.TempDir(), "child")
	srv, err := serving.Start([]string{"sh", "-c", "sleep 600 & echo $! > " + pidFile + "; echo started; trap '' TERM; wait"}, logPath, nil)
	require.NoError(t, err)
	var child int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidFile)
		child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && child > 0
	}, 10*time.Second, 20*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond) // past it: SIGKILL at once
	defer cancel()
	require.NoError(t, srv.Stop(ctx))
	require.NoError(t, srv.Stop(ctx), "idempotent")
	require.Eventually(t, func() bool { return errors.Is(syscall.Kill(child, 0), syscall.ESRCH) }, 5*time.Second, 20*time.Millisecond, "the server's child is gone")
	require.Contains(t, serving.Tail(logPath, 5), "started")
}

func TestStartMissingProgram(t *testing.T) {
	_, err := serving.Start([]string{"/nonexistent/vllm", "serve"}, filepath.Join(t.TempDir(), "l.log"), nil)
	require.ErrorContains(t, err, "/nonexistent/vllm")
}

// TestWaitReadyExit: a server that exits before serving fails the wait at
// once with its log's tail, not at the timeout.
func TestWaitReadyExit(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "s.log")
	srv, err := serving.Start([]string{"sh", "-c", "echo 'CUDA out of memory' >&2; exit 3"}, logPath, nil)
	require.NoError(t, err)
	defer srv.Stop(context.Background())
	port, err := serving.FreePort()
	require.NoError(t, err)
	start := time.Now()
	err = serving.WaitReady(context.Background(), nil, srv, fmt.Sprintf("http://127.0.0.1:%d/v1", port), "x", time.Minute)
	require.ErrorContains(t, err, "CUDA out of memory")
	require.ErrorContains(t, err, logPath)
	require.Less(t, time.Since(start), 20*time.Second)
}

// TestTransformersServe starts the real `transformers serve` over the
// SmolLM2 checkpoint with the served-model rule docs/serving.md gives for
// it (the checkpoint directory as the name), waits until it serves, asks
// it once, and stops it: no process is left.
func TestTransformersServe(t *testing.T) {
	pyenv.Require(t)
	ckpt := pyenv.RequireModel(t, "smollm2-135m-instruct")
	dir := filepath.Join(t.TempDir(), "0123456789abcdef")
	require.NoError(t, os.Symlink(ckpt, dir))
	port, err := serving.FreePort()
	require.NoError(t, err)
	hub := t.TempDir()
	logPath := filepath.Join(t.TempDir(), "serve.log")
	srv, err := serving.Start([]string{filepath.Join(pyenv.Venv(), "bin", "transformers"), "serve", dir, "--host", "127.0.0.1", "--port", strconv.Itoa(port)},
		logPath, []string{"HF_HUB_OFFLINE=1", "HF_HUB_CACHE=" + hub})
	require.NoError(t, err)
	defer srv.Stop(context.Background())
	base := fmt.Sprintf("http://127.0.0.1:%d/v1", port)
	require.NoError(t, serving.WaitReady(context.Background(), nil, srv, base, dir, 3*time.Minute))

	got, err := serving.ChatModel(context.Background(), http.DefaultClient, base, dir)
	require.NoError(t, err)
	require.True(t, model.SameServedModel(got, dir), got)
	err = serving.Check(context.Background(), http.DefaultClient, base, filepath.Join(t.TempDir(), "fedcba9876543210"))
	require.Error(t, err, "another checkpoint's name is refused by the pinned server")

	require.NoError(t, srv.Stop(context.Background()))
	require.True(t, errors.Is(syscall.Kill(-srv.Pid(), 0), syscall.ESRCH), "no process of the server's group is left")
	resp, err := http.Get(base + "/models")
	if err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	require.Error(t, err, "nothing listens any more")
}

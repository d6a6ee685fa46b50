package serving

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/spade-pipeline/spade/pipeline/config"
)

// ReloadRequest is one reload call: method, path (relative to the server
// root, base_url without /v1) and JSON body template.
type ReloadRequest struct {
	// Method is the HTTP method.
	Method string
	// Path is the request path.
	Path string
	// Body is the JSON body over {checkpoint} and {served_model}.
	Body string
	// ServesAs says which name answers after the reload: "checkpoint"
	// when the engine serves the loaded weights under {served_model}
	// (vLLM LoRA adapters: lora_name), "launch" when it keeps its launch
	// name (SGLang's update_weights_from_disk changes the weights, not
	// --served-model-name), so that model.name stays the served name.
	ServesAs string
}

// Presets are the built-in reload requests (docs/serving.md):
//
//   - "sglang": SGLang's native POST /update_weights_from_disk with
//     {"model_path": ...} (sglang/srt/entrypoints/http_server.py, as of
//     SGLang v0.4-v0.5; the answer is {"success": bool, "message": ...});
//   - "vllm-lora": vLLM's POST /v1/load_lora_adapter with {"lora_name",
//     "lora_path"} (docs "LoRA Adapters", "Dynamically serving LoRA
//     Adapters", vLLM v0.6.1 through v0.10; the server needs --enable-lora
//     and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True). vLLM documents no HTTP
//     endpoint that swaps a full checkpoint; use managed serving for
//     those.
var Presets = map[string]ReloadRequest{
	config.ReloadSGLang:   {Method: http.MethodPost, Path: "/update_weights_from_disk", Body: `{"model_path": "{checkpoint}"}`, ServesAs: "launch"},
	config.ReloadVLLMLoRA: {Method: http.MethodPost, Path: "/v1/load_lora_adapter", Body: `{"lora_name": "{served_model}", "lora_path": "{checkpoint}"}`, ServesAs: "checkpoint"},
}

// ReloadFor returns the reload request of model.reload: the preset with
// Method, Path and Body replaced where set. Without a preset the engine is
// taken to serve the checkpoint under {served_model}.
func ReloadFor(r config.Reload) ReloadRequest {
	rr, ok := Presets[r.Preset]
	if !ok {
		rr = ReloadRequest{Method: http.MethodPost, ServesAs: "checkpoint"}
	}
	if r.Method != "" {
		rr.Method = r.Method
	}
	if r.Path != "" {
		rr.Path = r.Path
	}
	if r.Body != "" {
		rr.Body = r.Body
	}
	return rr
}

// ServerRoot is baseURL without a trailing /v1 (the root of SGLang's and
// vLLM's native endpoints).
func ServerRoot(baseURL string) string {
	return strings.TrimSuffix(strings.TrimRight(baseURL, "/"), "/v1")
}

// Reload sends rr to the server at baseURL (with /v1) with p expanded into
// its body. Errors name the request: a body that is not JSON after
// expansion, a transport error, a status other than 2xx, or an SGLang-style
// answer {"success": false, "message": ...}.
func Reload(ctx context.Context, client *http.Client, baseURL, apiKey string, rr ReloadRequest, p Placeholders) error {
	body := p.Expand(rr.Body, true)
	if !json.Valid([]byte(body)) {
		return fmt.Errorf("reload: model.reload.body is not JSON once expanded: %s", excerpt([]byte(body)))
	}
	url := ServerRoot(baseURL) + rr.Path
	req, err := http.NewRequestWithContext(ctx, rr.Method, url, bytes.NewReader([]byte(body)))
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("reload: %s %s: %w", rr.Method, url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("reload: %s %s: HTTP %d: %s", rr.Method, url, resp.StatusCode, excerpt(data))
	}
	var ok struct {
		Success *bool  `json:"success"`
		Message string `json:"message"`
	}
	if json.Unmarshal(data, &ok) == nil && ok.Success != nil && !*ok.Success {
		return fmt.Errorf("reload: %s %s: the server did not load %s: %s", rr.Method, url, p.Checkpoint, ok.Message)
	}
	return nil
}

// ModelPath asks SGLang's GET /get_model_info for the model_path it has
// loaded (SGLang sets it on update_weights_from_disk); "" with no error
// when the server has no such endpoint (404).
func ModelPath(ctx context.Context, client *http.Client, baseURL string) (string, error) {
	url := ServerRoot(baseURL) + "/get_model_info"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode == http.StatusNotFound {
		return "", nil
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: HTTP %d: %s", url, resp.StatusCode, excerpt(data))
	}
	var info struct {
		ModelPath string `json:"model_path"`
	}
	if err := json.Unmarshal(data, &info); err != nil {
		return "", fmt.Errorf("GET %s: %w", url, err)
	}
	return info.ModelPath, nil
}

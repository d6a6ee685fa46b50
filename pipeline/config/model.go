package config

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Model configures the backend both roles use.
type Model struct {
	// Backend is "procedural" (offline stand-in) or "openai".
	Backend string `yaml:"backend" json:"backend"`
	// BaseURL and Name address an OpenAI-compatible server. BaseURL is the
	// server root including /v1.
	BaseURL string `yaml:"base_url" json:"base_url"`
	// Name is the model name sent in every request to the openai backend
	// (required with it unless Replay is set).
	Name string `yaml:"name" json:"name"`
	// APIKeyEnv names the environment variable holding the API key; the key
	// itself is never stored.
	APIKeyEnv string `yaml:"api_key_env" json:"api_key_env"`
	// Concurrency bounds the model requests in flight (default 16, > 0).
	// Operational: left out of the config digest.
	Concurrency int `yaml:"concurrency" json:"concurrency"`
	// TimeoutS bounds one HTTP attempt of the openai backend, in seconds
	// (default 120, > 0). Operational.
	TimeoutS float64 `yaml:"timeout_s" json:"timeout_s"`
	// MaxRetries is the number of retries after the first attempt of a
	// retryable failure (HTTP 408, 429, 5xx, network), honouring
	// Retry-After (default 5; 0 means none, >= 0). Operational.
	MaxRetries int `yaml:"max_retries" json:"max_retries"`
	// UnavailableAfter is the number of model calls in a row, within one
	// stage part, that may fail after their retries with a transient error
	// (connection refused, attempt timeout, 429, 5xx) before the stage
	// stops calling and fails, committing nothing (default 32; 0 turns the
	// early stop off, 0..2^20). Whatever this setting, a stage part whose
	// every call failed that way fails too: an outage of the model server
	// fails the round (resumable), it does not commit a round of errors.
	// Operational (omitted from the pinned config).
	UnavailableAfter int `yaml:"unavailable_after" json:"unavailable_after,omitempty"`
	// ExtraBody is a JSON object whose members are sent as they are, as
	// top-level fields of every request of the openai backend (the OpenAI
	// Python client's extra_body): "chat_template_kwargs" ({"enable_thinking":
	// false} for Qwen3), "top_k", "repetition_penalty", "min_p" (default ""
	// sends nothing). Sampling settings per role are design.*, hint.* and
	// rollout.*; a member here replaces the field of the same name.
	ExtraBody string `yaml:"extra_body" json:"extra_body,omitempty"`
	// ToolChoice is the tool_choice sent with requests that declare tools
	// ("auto", "required" or "none"); "" (default) sends none, so the
	// server's default applies.
	ToolChoice string `yaml:"tool_choice" json:"tool_choice,omitempty"`
	// TokenIDs says whether the openai backend asks the server for each
	// sample's token ids and per-token log-probs (vLLM and SGLang
	// extensions, docs/models.md "Token ids and log-probs"): "on", "off",
	// or "" / "auto" (default): on for the designer and agent roles when
	// grpo.trainer is not none (the trainer then trains on the sampled
	// tokens, docs/training.md "Training on the sampled tokens"), off
	// otherwise. OpenAI's own API rejects the extensions: leave it off
	// there.
	TokenIDs string `yaml:"token_ids" json:"token_ids,omitempty"`
	// Replay names a run whose recorded llm_calls answer every call.
	Replay string `yaml:"replay" json:"replay"`

	// Serving says how the round's policy reaches the openai server
	// (docs/serving.md): "fixed" (a server the user runs, whose weights
	// never change), "managed" (spade starts ServeCommand over the
	// round's checkpoint for each stage that calls the model and stops
	// it) or "reload" (a running server loads the checkpoint through
	// Reload before each such stage). "" is fixed, but with grpo.trainer
	// other than none an openai role must name its serving explicitly.
	Serving string `yaml:"serving" json:"serving,omitempty"`
	// ServeCommand is the managed serving command, an argv template:
	// {checkpoint} (the checkpoint's local directory, required),
	// {port} (ServePort, or a free loopback port) and {served_model}
	// (the checkpoint id), e.g. [vllm, serve, "{checkpoint}", --port,
	// "{port}", --served-model-name, "{served_model}"].
	ServeCommand []string `yaml:"serve_command" json:"serve_command,omitempty"`
	// ServedModelName is the model name requests send and answers must
	// carry in managed and reload serving, a template over {served_model}
	// (the checkpoint id) and {checkpoint} (its directory); "" means
	// "{served_model}". transformers serve, which has no
	// --served-model-name and answers only to the path it was given,
	// needs "{checkpoint}".
	ServedModelName string `yaml:"served_model_name" json:"served_model_name,omitempty"`
	// ServePort is the managed server's loopback port (0: a free port
	// chosen per stage). Operational.
	ServePort int `yaml:"serve_port" json:"serve_port,omitempty"`
	// ServeReadyTimeoutS bounds the wait for a managed server to list the
	// served model, or for a reload to take effect, in seconds (0: 600).
	// Operational.
	ServeReadyTimeoutS float64 `yaml:"serve_ready_timeout_s" json:"serve_ready_timeout_s,omitempty"`
	// CheckpointCache is the local directory that trained checkpoints are
	// materialised into for serving, one sha256-verified directory per
	// checkpoint id ("": <os temp dir>/spade-checkpoints). Operational.
	CheckpointCache string `yaml:"checkpoint_cache" json:"checkpoint_cache,omitempty"`
	// Reload is the reload request of reload serving.
	Reload Reload `yaml:"reload" json:"reload,omitzero"`
	// Roles overrides backend, base_url, name and serving per SPADE role;
	// an empty field takes the model.* value.
	Roles Roles `yaml:"roles" json:"roles,omitzero"`
}

// Reload is the request that makes a long-running server load a
// checkpoint (model.reload). Preset "sglang" is SGLang's POST
// /update_weights_from_disk {"model_path": "{checkpoint}"}; "vllm-lora"
// is vLLM's POST /v1/load_lora_adapter {"lora_name": "{served_model}",
// "lora_path": "{checkpoint}"} (docs/serving.md names the versions).
// Method, Path and Body, when set, replace the preset's; Path is relative
// to the server root (base_url without /v1).
type Reload struct {
	// Preset is "sglang", "vllm-lora" or "" (Method, Path and Body given).
	Preset string `yaml:"preset" json:"preset,omitempty"`
	// Method is the HTTP method (default POST).
	Method string `yaml:"method" json:"method,omitempty"`
	// Path is the request path, e.g. /update_weights_from_disk.
	Path string `yaml:"path" json:"path,omitempty"`
	// Body is the JSON body template over {checkpoint} and {served_model}.
	Body string `yaml:"body" json:"body,omitempty"`
}

// Roles holds the per-role overrides of model.* (SPADE's two roles, the
// designer also writing hints): a frozen designer, an external hint
// model, or a procedural designer with a real agent are configurations.
type Roles struct {
	// Designer is the backend of the design stage.
	Designer Role `yaml:"designer" json:"designer,omitzero"`
	// Hint is the backend of the hint stage.
	Hint Role `yaml:"hint" json:"hint,omitzero"`
	// Agent is the backend of the rollout stage.
	Agent Role `yaml:"agent" json:"agent,omitzero"`
}

// Role overrides model.backend, model.base_url, model.name and
// model.serving for one role; "" keeps the model.* value.
type Role struct {
	// Backend is "procedural" or "openai".
	Backend string `yaml:"backend" json:"backend,omitempty"`
	// BaseURL is the role's server root including /v1.
	BaseURL string `yaml:"base_url" json:"base_url,omitempty"`
	// Name is the role's model name (fixed serving).
	Name string `yaml:"name" json:"name,omitempty"`
	// Serving is fixed, managed or reload.
	Serving string `yaml:"serving" json:"serving,omitempty"`
}

// RoleNames are the roles model.roles configures, in order.
var RoleNames = []string{"designer", "hint", "agent"}

// ForRole returns the model settings of role ("designer", "hint" or
// "agent"): m with the role's non-empty overrides applied and Roles
// cleared. An unknown role gives m unchanged.
func (m Model) ForRole(role string) Model {
	var r Role
	switch role {
	case "designer":
		r = m.Roles.Designer
	case "hint":
		r = m.Roles.Hint
	case "agent":
		r = m.Roles.Agent
	}
	m.Roles = Roles{}
	if r.Backend != "" {
		m.Backend = r.Backend
	}
	if r.BaseURL != "" {
		m.BaseURL = r.BaseURL
	}
	if r.Name != "" {
		m.Name = r.Name
	}
	if r.Serving != "" {
		m.Serving = r.Serving
	}
	return m
}

// WantTokenIDs reports whether role's calls ask for token ids and
// log-probs (model.token_ids): "on" always, "off" never, "" and "auto"
// for the designer and agent roles when grpo.trainer is not none (their
// samples are trained; hints are not).
func (c *Config) WantTokenIDs(role string) bool {
	switch c.Model.TokenIDs {
	case "on":
		return true
	case "off":
		return false
	}
	return (role == "designer" || role == "agent") && c.GRPO.Trainer != "" && c.GRPO.Trainer != "none"
}

// ExtraBodyFields decodes model.extra_body: nil for "", else the JSON
// object's members. Errors name the setting: not JSON, or not an object.
func (m Model) ExtraBodyFields() (map[string]any, error) {
	if strings.TrimSpace(m.ExtraBody) == "" {
		return nil, nil
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(m.ExtraBody), &v); err != nil || v == nil {
		return nil, fmt.Errorf(`model.extra_body must be a JSON object such as {"chat_template_kwargs": {"enable_thinking": false}} (got %q)`, m.ExtraBody)
	}
	return v, nil
}

// servingProblems checks model.serving and model.roles: each role's
// backend, its server, and that a trainer is not paired with a fixed
// server by default (training would never reach it).
func (c Config) servingProblems() []problem {
	var errs []problem
	seen := map[string]bool{}
	add := func(text string, keys ...string) {
		if !seen[text] { // the roles that take model.* as it is share its problems
			seen[text] = true
			errs = append(errs, problem{keys, text})
		}
	}
	m := c.Model
	for _, role := range RoleNames {
		rm := m.ForRole(role)
		pre := "model"
		if rm.Backend != m.Backend || rm.BaseURL != m.BaseURL || rm.Name != m.Name || rm.Serving != m.Serving {
			pre = "model.roles." + role
		}
		switch rm.Backend {
		case "procedural", "openai":
		default:
			if pre != "model" { // model.backend itself is checked with the other settings
				add(fmt.Sprintf("%s.backend must be procedural or openai (got %q)", pre, rm.Backend), pre+".backend")
			}
			continue
		}
		switch rm.Serving {
		case "", "fixed", "managed", "reload":
		default:
			add(fmt.Sprintf("%s.serving must be fixed, managed or reload (got %q)", pre, rm.Serving), pre+".serving", "model.serving")
			continue
		}
		if rm.Backend != "openai" || m.Replay != "" {
			continue
		}
		switch rm.Serving {
		case "", "fixed":
			if rm.BaseURL == "" || rm.Name == "" {
				add(fmt.Sprintf("%s: model.backend openai needs model.base_url and model.name (role %s)", pre, role), "model.backend", "model.base_url", "model.name")
			}
			if c.GRPO.Trainer != "none" && rm.Serving == "" {
				add(fmt.Sprintf("%s: grpo.trainer %s trains a policy that a fixed server never loads; set model.serving to managed or reload to serve each round's checkpoint, or to fixed to accept off-policy rounds (docs/serving.md)", pre, c.GRPO.Trainer), "model.serving", pre+".serving", "grpo.trainer")
			}
		case "managed":
			if !slices.ContainsFunc(m.ServeCommand, func(a string) bool { return strings.Contains(a, "{checkpoint}") }) {
				add(fmt.Sprintf("%s.serving managed needs model.serve_command, an argv with {checkpoint} (e.g. [vllm, serve, \"{checkpoint}\", --port, \"{port}\", --served-model-name, \"{served_model}\"])", pre), "model.serve_command", "model.serving")
			}
		case "reload":
			if rm.BaseURL == "" {
				add(fmt.Sprintf("%s.serving reload needs model.base_url, the running server", pre), "model.base_url", "model.serving")
			}
			switch m.Reload.Preset {
			case "sglang", "vllm-lora":
			case "":
				if m.Reload.Path == "" || m.Reload.Body == "" {
					add("model.serving reload needs model.reload.preset (sglang or vllm-lora) or model.reload.path and model.reload.body", "model.reload.preset", "model.reload.path")
				}
			default:
				add(fmt.Sprintf("model.reload.preset must be sglang or vllm-lora (got %q)", m.Reload.Preset), "model.reload.preset")
			}
		}
		if (rm.Serving == "managed" || rm.Serving == "reload") && strings.HasPrefix(c.GRPO.BaseCheckpoint, "tiny:") {
			add(fmt.Sprintf("%s.serving %s serves checkpoints from files; grpo.base_checkpoint %q is the trainer's built-in tiny model, which no server loads: name a Hugging Face checkpoint directory", pre, rm.Serving, c.GRPO.BaseCheckpoint), "grpo.base_checkpoint", "model.serving")
		}
	}
	if m.ServePort < 0 || m.ServePort > 65535 {
		add(fmt.Sprintf("model.serve_port must be in [0, 65535] (got %d)", m.ServePort), "model.serve_port")
	}
	if t := m.ServeReadyTimeoutS; t != 0 && !(t >= minTimeoutS && t <= maxTimeoutS) {
		add(fmt.Sprintf("model.serve_ready_timeout_s must be 0 (600) or in [%g, %g] seconds (got %g)", minTimeoutS, maxTimeoutS, t), "model.serve_ready_timeout_s")
	}
	return errs
}

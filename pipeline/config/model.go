package config

import (
	"encoding/json"
	"fmt"
	"net/url"
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
	APIKeyEnv string `yaml:"api_key_env" json:"api_key_env" spade:"operational"`
	// Concurrency bounds the model requests in flight (default 16, > 0).
	// Operational: left out of the config digest.
	Concurrency int `yaml:"concurrency" json:"concurrency" spade:"operational"`
	// TimeoutS bounds one HTTP attempt of the openai backend, in seconds
	// (default 120, > 0). Operational.
	TimeoutS float64 `yaml:"timeout_s" json:"timeout_s" spade:"operational"`
	// MaxRetries is the number of retries after the first attempt of a
	// retryable failure (HTTP 408, 429, 5xx, network), honouring
	// Retry-After (default 5; 0 means none, >= 0). Operational.
	MaxRetries int `yaml:"max_retries" json:"max_retries" spade:"operational"`
	// UnavailableAfter is the number of model calls in a row, within one
	// stage part, that may fail after their retries with a transient error
	// (connection refused, attempt timeout, 429, 5xx) before the stage
	// stops calling and fails, committing nothing (default 32; 0 turns the
	// early stop off, 0..2^20). Whatever this setting, a stage part whose
	// every call failed that way fails too: an outage of the model server
	// fails the round (resumable), it does not commit a round of errors.
	// Operational (omitted from the pinned config).
	UnavailableAfter int `yaml:"unavailable_after" json:"unavailable_after,omitempty" spade:"operational"`
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
	ServePort int `yaml:"serve_port" json:"serve_port,omitempty" spade:"operational"`
	// ServeReadyTimeoutS bounds the wait for a managed server to list the
	// served model, or for a reload to take effect, in seconds (0: 600).
	// Operational.
	ServeReadyTimeoutS float64 `yaml:"serve_ready_timeout_s" json:"serve_ready_timeout_s,omitempty" spade:"operational"`
	// CheckpointCache is the local directory that trained checkpoints are
	// materialised into for serving, one sha256-verified directory per
	// checkpoint id ("": <os temp dir>/spade-checkpoints). Operational.
	CheckpointCache string `yaml:"checkpoint_cache" json:"checkpoint_cache,omitempty" spade:"operational"`
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
var RoleNames = []string{RoleDesigner, RoleHint, RoleAgent}

// ForRole returns the model settings of role ("designer", "hint" or
// "agent"): m with the role's non-empty overrides applied and Roles
// cleared. An unknown role gives m unchanged.
func (m Model) ForRole(role string) Model {
	var r Role
	switch role {
	case RoleDesigner:
		r = m.Roles.Designer
	case RoleHint:
		r = m.Roles.Hint
	case RoleAgent:
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
	case TokenIDsOn:
		return true
	case TokenIDsOff:
		return false
	}
	return (role == RoleDesigner || role == RoleAgent) && c.GRPO.Trainer != "" && c.GRPO.Trainer != TrainerNone
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

// The values of model.backend and model.roles.*.backend.
const (
	// BackendProcedural is the offline stand-in model
	// (engines/model/procedural).
	BackendProcedural = "procedural"
	// BackendOpenAI is any OpenAI-compatible server (engines/model/openai).
	BackendOpenAI = "openai"
)

// Backends lists the values of model.backend.
var Backends = []string{BackendProcedural, BackendOpenAI}

// The values of model.serving and model.roles.*.serving ("" is fixed;
// docs/serving.md).
const (
	// ServingFixed is a server the user runs, whose weights never change.
	ServingFixed = "fixed"
	// ServingManaged starts model.serve_command over the round's
	// checkpoint for each stage that calls the model, and stops it.
	ServingManaged = "managed"
	// ServingReload makes a running server load the round's checkpoint
	// (model.reload) before each stage that calls the model.
	ServingReload = "reload"
)

// Servings lists the values of model.serving besides "" (fixed).
var Servings = []string{ServingFixed, ServingManaged, ServingReload}

// FromCheckpoints reports whether serving (a model.serving value) serves
// the round's checkpoint: managed or reload.
func FromCheckpoints(serving string) bool {
	return serving == ServingManaged || serving == ServingReload
}

// The values of model.reload.preset besides "" (method, path and body
// given).
const (
	// ReloadSGLang is SGLang's POST /update_weights_from_disk.
	ReloadSGLang = "sglang"
	// ReloadVLLMLoRA is vLLM's POST /v1/load_lora_adapter.
	ReloadVLLMLoRA = "vllm-lora"
)

// ReloadPresets lists the values of model.reload.preset besides "".
var ReloadPresets = []string{ReloadSGLang, ReloadVLLMLoRA}

// The values of model.token_ids besides "" (auto).
const (
	// TokenIDsAuto asks for token ids for the trained roles when a
	// trainer runs.
	TokenIDsAuto = "auto"
	// TokenIDsOn always asks for token ids and log-probs.
	TokenIDsOn = "on"
	// TokenIDsOff never asks.
	TokenIDsOff = "off"
)

// The SPADE roles that model.roles configures (RoleNames).
const (
	// RoleDesigner is the design stage's model.
	RoleDesigner = "designer"
	// RoleHint is the hint stage's model.
	RoleHint = "hint"
	// RoleAgent is the rollout stage's model.
	RoleAgent = "agent"
)

// DefaultModel is model.*'s default: the offline procedural backend,
// the key in OPENAI_API_KEY, 16 requests in flight, 120 s per attempt, 5
// retries, an outage after 32 failed calls in a row.
func DefaultModel() Model {
	return Model{Backend: BackendProcedural, APIKeyEnv: "OPENAI_API_KEY", Concurrency: 16, TimeoutS: 120, MaxRetries: 5, UnavailableAfter: 32}
}

// roleSettings returns role's model settings (ForRole), the key prefix
// its problems name ("model", or "model.roles.ROLE" where the role
// overrides model.*), and whether its backend and serving are known
// values (the rules of each serving apply only then).
func (m Model) roleSettings(role string) (Model, string, bool) {
	rm := m.ForRole(role)
	pre := "model"
	if rm.Backend != m.Backend || rm.BaseURL != m.BaseURL || rm.Name != m.Name || rm.Serving != m.Serving {
		pre = "model.roles." + role
	}
	ok := slices.Contains(Backends, rm.Backend) && (rm.Serving == "" || slices.Contains(Servings, rm.Serving))
	return rm, pre, ok
}

// Check checks model.*: counts, timeouts and enums, the server URL and
// key variable, extra_body, and each role's backend and serving (a server
// to reach, a serve command, a reload request). Whether a trainer pairs
// with each role's serving is Config's rule (crossProblems).
func (m Model) Check() []Problem {
	var p problems
	p.finite("model", m)
	p.count("model.concurrency", m.Concurrency)
	p.countOrZero("model.max_retries", m.MaxRetries)
	p.countOrZero("model.unavailable_after", m.UnavailableAfter)
	switch m.TokenIDs {
	case "", TokenIDsAuto, TokenIDsOn, TokenIDsOff:
	default:
		p.add(fmt.Sprintf("model.token_ids must be auto, on or off (got %q)", m.TokenIDs), "model.token_ids")
	}
	switch m.ToolChoice {
	case "", "auto", "required", "none":
	default:
		p.add(fmt.Sprintf("model.tool_choice must be auto, required or none, or empty to send none (got %q)", m.ToolChoice), "model.tool_choice")
	}
	if _, err := m.ExtraBodyFields(); err != nil {
		p.add(err.Error(), "model.extra_body")
	}
	p.timeout("model.timeout_s", m.TimeoutS)
	if m.BaseURL != "" {
		// The config is stored in the run's _RUN.json: a password in the
		// URL would be stored with it. The key comes from model.api_key_env.
		if u, err := url.Parse(m.BaseURL); err != nil || u.Scheme == "" || u.Host == "" {
			p.add(fmt.Sprintf("model.base_url %q is not an absolute URL like http://127.0.0.1:8000/v1", m.BaseURL), "model.base_url")
		} else if u.User != nil {
			p.add("model.base_url must not carry credentials (user:password@): they would be stored in the run's _RUN.json; put the key in the variable model.api_key_env names", "model.base_url")
		}
	}
	if strings.HasPrefix(m.APIKeyEnv, "SPADE_") {
		p.add(fmt.Sprintf("model.api_key_env %q: SPADE_* variables are spade's settings; name another variable", m.APIKeyEnv), "model.api_key_env")
	}
	p.oneOf("model.backend", m.Backend, Backends)
	p = append(p, m.servingProblems()...)
	return p
}

// servingProblems checks model.serving and model.roles: each role's
// backend, and what its serving needs (a server and a model name, a
// serve command, a reload request).
func (m Model) servingProblems() []Problem {
	var p problems
	for _, role := range RoleNames {
		rm, pre, _ := m.roleSettings(role)
		if !slices.Contains(Backends, rm.Backend) {
			if pre != "model" { // model.backend itself is checked with the other settings
				p.addOnce(fmt.Sprintf("%s.backend must be %s (got %q)", pre, orList(Backends), rm.Backend), pre+".backend")
			}
			continue
		}
		if rm.Serving != "" && !slices.Contains(Servings, rm.Serving) {
			p.addOnce(fmt.Sprintf("%s.serving must be %s (got %q)", pre, orList(Servings), rm.Serving), pre+".serving", "model.serving")
			continue
		}
		if rm.Backend != BackendOpenAI || m.Replay != "" {
			continue
		}
		switch rm.Serving {
		case "", ServingFixed:
			if rm.BaseURL == "" || rm.Name == "" {
				p.addOnce(fmt.Sprintf("%s: model.backend openai needs model.base_url and model.name (role %s)", pre, role), "model.backend", "model.base_url", "model.name")
			}
		case ServingManaged:
			if !slices.ContainsFunc(m.ServeCommand, func(a string) bool { return strings.Contains(a, "{checkpoint}") }) {
				p.addOnce(fmt.Sprintf("%s.serving managed needs model.serve_command, an argv with {checkpoint} (e.g. [vllm, serve, \"{checkpoint}\", --port, \"{port}\", --served-model-name, \"{served_model}\"])", pre), "model.serve_command", "model.serving")
			}
		case ServingReload:
			if rm.BaseURL == "" {
				p.addOnce(fmt.Sprintf("%s.serving reload needs model.base_url, the running server", pre), "model.base_url", "model.serving")
			}
			switch {
			case slices.Contains(ReloadPresets, m.Reload.Preset):
			case m.Reload.Preset == "":
				if m.Reload.Path == "" || m.Reload.Body == "" {
					p.addOnce("model.serving reload needs model.reload.preset (sglang or vllm-lora) or model.reload.path and model.reload.body", "model.reload.preset", "model.reload.path")
				}
			default:
				p.addOnce(fmt.Sprintf("model.reload.preset must be %s (got %q)", orList(ReloadPresets), m.Reload.Preset), "model.reload.preset")
			}
		}
	}
	if m.ServePort < 0 || m.ServePort > 65535 {
		p.add(fmt.Sprintf("model.serve_port must be in [0, 65535] (got %d)", m.ServePort), "model.serve_port")
	}
	if t := m.ServeReadyTimeoutS; t != 0 && !(t >= minTimeoutS && t <= maxTimeoutS) {
		p.add(fmt.Sprintf("model.serve_ready_timeout_s must be 0 (600) or in [%g, %g] seconds (got %g)", minTimeoutS, maxTimeoutS, t), "model.serve_ready_timeout_s")
	}
	return p
}

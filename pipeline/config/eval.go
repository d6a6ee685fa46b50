package config

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

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
	Concurrency int `yaml:"concurrency" json:"concurrency,omitempty" spade:"operational"`
	// TimeoutS bounds one evaluation request, in seconds (default 600).
	// Operational.
	TimeoutS float64 `yaml:"timeout_s" json:"timeout_s,omitempty" spade:"operational"`
	// Python is the evaluator's interpreter, one with reasoning-gym and
	// lm-eval installed (default the pinned venv, requirements.txt).
	// Operational.
	Python string `yaml:"python" json:"python,omitempty" spade:"operational"`
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

// DefaultEval is eval.*'s default: off (every 0), 512 tokens per
// answer, greedy, 8 requests in flight of at most 600 s, the pinned
// venv's interpreter, 100 reasoning-gym items per task with its default
// system prompt.
func DefaultEval() Eval {
	return Eval{MaxTokens: 512, Concurrency: 8, TimeoutS: 600, Python: DefaultVenvPython,
		ReasoningGym: EvalReasoningGym{Size: 100, SystemPrompt: "default"}}
}

// Check checks eval.*: finite numbers, ranges, known system prompts, a
// suite when the eval stage runs, an include path for lm_eval tasks, an
// absolute interpreter. That the eval stage has a served agent is
// Config's rule (crossProblems).
func (e Eval) Check() []Problem {
	var p problems
	add := func(key, format string, a ...any) { p.add(fmt.Sprintf(format, a...), key) }
	p.finite("eval", e)
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
	p.absPath("eval.python", e.Python)
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
	if e.Every > 0 && !e.HasSuite() {
		add("eval.every", "eval.every is %d but no suite is configured: set eval.reasoning_gym.tasks or eval.lm_eval.tasks", e.Every)
	}
	return p
}

// pin implements pinner: with eval.every 0 no eval stage runs, and the
// other eval settings change nothing the run computes (spade eval
// writes outside the rounds), so the section pins blank.
func (e Eval) pin() any {
	if e.Every == 0 {
		return Eval{}
	}
	return e
}

// unpin implements unpinner: a section pinned blank (every and
// max_tokens 0) is the default.
func (e Eval) unpin() any {
	if e.Every == 0 && e.MaxTokens == 0 {
		return DefaultEval()
	}
	return e
}

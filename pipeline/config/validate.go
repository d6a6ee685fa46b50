package config

import (
	"fmt"
	"math"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

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

// maxListedProblems bounds the problems of a file listed in one error;
// the rest are counted.
const maxListedProblems = 20

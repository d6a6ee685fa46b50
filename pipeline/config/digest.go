package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
)

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

// Package config holds the run configuration: one YAML file plus SPADE_*
// environment overrides over built-in defaults (docs/config.md). A run is
// created with one config; its digest is pinned in the run's _RUN.json and a
// different config for the same run is refused (changing config means a new
// run, docs/design.md "Runs, rounds, tables").
package config

import (
	"errors"
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
	Workers int `yaml:"workers" json:"workers" spade:"operational"`
	// RegenerateEvery is k: a regeneration every k rounds (docs/method.md step 8:
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

// FixedPool reports whether design.mode is fixed_pool: no round
// regenerates, and every round plays the pool imported at round 0.
func (c *Config) FixedPool() bool { return c.Design.Mode == DesignModeFixedPool }

// Default returns the embedded default: the offline procedural backend, the
// paper's sizes, no trainer. Each section's default is its own (DefaultModel,
// DefaultGRPO, ...); the root settings' are here.
func Default() Config {
	return Config{
		Seed:            1,
		Workers:         0,
		RegenerateEvery: 4,
		Sample:          DefaultSample(),
		Model:           DefaultModel(),
		Sandbox:         DefaultSandbox(),
		Design:          DefaultDesign(),
		Hint:            DefaultHint(),
		Rollout:         DefaultRollout(),
		Label:           DefaultLabel(),
		Memory:          DefaultMemory(),
		GRPO:            DefaultGRPO(),
		Observe:         DefaultObserve(),
		Metrics:         DefaultMetrics(),
		Eval:            DefaultEval(),
	}
}

package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// GRPO configures the training step (docs/method.md step 8, docs/training.md).
// The trainer's settings among these reach the torch trainer through
// stages/grpo.NewTrainerConfig, which maps them to the trainer's JSON keys
// (clip_eps to clip_epsilon, ...); their defaults are Default()'s, and the
// trainer applies none of its own.
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
	TimeoutS float64 `yaml:"timeout_s" json:"timeout_s" spade:"operational"`
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
	// the policy mismatch with truncated importance sampling (--use-tis),
	// which the trainer applies with grpo.tis_cap > 0 (docs/training.md
	// "Designer delay").
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
	MismatchWarn float64 `yaml:"mismatch_warn" json:"mismatch_warn,omitempty" spade:"operational"`

	// LossAggregation is how the trainer averages the per-token
	// policy-gradient and KL terms over the batch: "token_mean" (default:
	// one mean over every trained token of the batch, verl's
	// "token-mean", as DAPO and Dr. GRPO recommend) or "sample_mean" (each
	// sample's tokens averaged, then the mean over samples: verl's
	// "seq-mean-token-mean", slime's default without
	// --calculate-per-token-loss, which the public SPADE launchers use;
	// docs/training.md "Loss"). Pinned blank at the default, so runs
	// pinned before it keep their digest.
	LossAggregation string `yaml:"loss_aggregation" json:"loss_aggregation,omitempty"`
	// AgentSamples is what one trained agent sample is: "play" (default:
	// the whole play, every assistant turn trained in one sequence) or
	// "turn" (one sample per assistant turn, trained in the context that
	// turn was sampled in, each with the play's advantage and weight: the
	// public 8B launcher's per-turn training; docs/training.md "Agent
	// samples"). The trainer splits the play; train_batch keeps one row
	// per play. Pinned blank at the default.
	AgentSamples string `yaml:"agent_samples" json:"agent_samples,omitempty"`
}

// AttnImplementations are the values grpo.attn_implementation takes
// besides "" (space-separated): the trainer's varlen_sdpa and
// transformers' attention implementations (trainer/spade_trainer/config.py
// accepts the same).
const AttnImplementations = "varlen_sdpa sdpa eager flash_attention_2 flash_attention_3 flex_attention"

// DefaultTrainerPython is grpo.python's default: the interpreter of the
// pinned virtual environment `make venv` installs (requirements.txt; the
// fixed path /opt/spade/venv, which internal/pyenv also uses), where
// torch, transformers and safetensors are importable. Debian's
// /usr/bin/python3 is the sandbox's interpreter and has none of them.
const DefaultTrainerPython = "/opt/spade/venv/bin/python"

// DefaultMismatchWarn is grpo.mismatch_warn's default, in nats: 0.1.
// Same weights served in bf16 and trained in fp32 differ by about 0.01
// nats per token; a server on another checkpoint differs by more.
const DefaultMismatchWarn = 0.1

// ParseWeightRule checks a grpo.weight_rule text: "ratio", "none" or
// "fixed:X" with X a finite number > 0 (the designer sample weight,
// docs/method.md "Designer training"). Returns the kind and, for fixed, X.
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

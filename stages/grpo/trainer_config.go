package grpo

import (
	"encoding/json"
	"fmt"

	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
)

// TrainerConfigContract is the path, relative to the repository root, of
// the trainer config the grpo stage writes for config.Default()'s round 1
// (NewTrainerConfig, encoded as RunTrainer writes it). It is generated from
// TrainerConfig and committed: TestTrainerConfigContract fails when it is
// out of date (`go test ./stages/grpo -run TestTrainerConfigContract
// -update` rewrites it), and trainer/tests/test_trainer.py loads it into
// the Python TrainConfig, so a key that one side has and the other lacks
// fails a test on each side (docs/training.md "Config file").
const TrainerConfigContract = "trainer/tests/testdata/trainer_config.json"

// TrainerConfig is the trainer's JSON contract: the --config file
// (WORKDIR/config.json) RunTrainer writes, one key per field (its json
// tag), every field always written. It is the one definition of the keys:
// the Python trainer's TrainConfig (trainer/spade_trainer/config.py) has
// the same fields with no default values, and its load_config refuses a
// missing or unknown key with exit status 2 (ErrTrainerInput). The values
// come from the run's grpo settings (NewTrainerConfig), whose defaults
// live in config.Default(); the keys no grpo setting controls take the
// fixed value documented on the field. Key names are the trainer's
// (clip_epsilon), not the YAML's (grpo.clip_eps): the two namings are
// mapped in NewTrainerConfig only.
type TrainerConfig struct {
	// LR is the AdamW learning rate; grpo.lr.
	LR float64 `json:"lr"`
	// ClipEpsilon is the GRPO/PPO ratio clip: ratio in [1-eps, 1+eps];
	// grpo.clip_eps.
	ClipEpsilon float64 `json:"clip_epsilon"`
	// ClipEpsilonHigh, when > 0, is the upper clip instead (ratio in
	// [1-ClipEpsilon, 1+ClipEpsilonHigh]; DAPO's clip-higher, 0.28 in
	// SPADE's public code); 0 means ClipEpsilon. grpo.clip_eps_high.
	ClipEpsilonHigh float64 `json:"clip_epsilon_high"`
	// KLBeta weights the k3 KL(policy || reference) term; 0 disables it.
	// grpo.kl_beta.
	KLBeta float64 `json:"kl_beta"`
	// GradClip is the max global gradient L2 norm; 0 disables clipping.
	// Fixed at 1.0.
	GradClip float64 `json:"grad_clip"`
	// InnerSteps is the number of optimiser steps on the batch per round.
	// Fixed at 1.
	InnerSteps int `json:"inner_steps"`
	// MicroBatchSize caps the samples packed into one forward/backward
	// (gradient accumulation over the batch; same gradient whatever the
	// size). Fixed at 1024: the token budget MaxTokensPerMicroBatch is
	// what bounds a micro-batch in practice.
	MicroBatchSize int `json:"micro_batch_size"`
	// MaxTokensPerMicroBatch is the token budget of one packed micro-batch
	// (no padding; a longer sample gets one of its own), >= 1;
	// grpo.max_tokens_per_micro_batch.
	MaxTokensPerMicroBatch int `json:"max_tokens_per_micro_batch"`
	// Seed is the torch seed (torch.manual_seed): pipeline.DeriveSeed of
	// the run seed, "grpo" and the round.
	Seed int64 `json:"seed"`
	// Dtype is the compute dtype: auto (bf16 on CUDA, fp32 on CPU),
	// float32, bfloat16, float16 (autocast with one process, FSDP2's
	// parameter dtype under torchrun). Master weights, gradient reduction
	// and AdamW state stay fp32. grpo.dtype.
	Dtype string `json:"dtype"`
	// Device is auto, cpu, cuda or cuda:N. Fixed at "auto" (cuda when
	// available; each torchrun rank takes cuda:LOCAL_RANK).
	Device string `json:"device"`
	// WeightDecay is AdamW's decoupled weight decay, >= 0 (with KLBeta 0
	// and weight decay 0 a batch whose advantages are all 0 has a zero
	// gradient: a fresh AdamW leaves the weights unchanged, resumed AdamW
	// moments still move them; the KL term to a reference other than the
	// policy has a gradient of its own). grpo.weight_decay.
	WeightDecay float64 `json:"weight_decay"`
	// AdamBeta1 is AdamW's first-moment decay, in [0, 1); grpo.adam_beta1.
	AdamBeta1 float64 `json:"adam_beta1"`
	// AdamBeta2 is AdamW's second-moment decay, in [0, 1); grpo.adam_beta2.
	AdamBeta2 float64 `json:"adam_beta2"`
	// AdamEps is AdamW's epsilon. Fixed at 1e-8.
	AdamEps float64 `json:"adam_eps"`
	// MaxSeqLen is the longest sample in tokens, >= 1; grpo.max_seq_len.
	MaxSeqLen int `json:"max_seq_len"`
	// Overlong says what happens to a longer sample: "truncate_left" (keep
	// its last MaxSeqLen tokens, dropping it if no trained token remains),
	// "drop", or "error". Counts come in the trainer's "encode" event.
	// Fixed at "truncate_left".
	Overlong string `json:"overlong"`
	// SaveDtype is the servable weights' dtype: float32, bfloat16 or
	// float16; the fp32 master weights go with the optimizer state.
	// grpo.save_dtype.
	SaveDtype string `json:"save_dtype"`
	// ReferenceCheckpoint is the KL reference; "" = the input checkpoint.
	// grpo.base_checkpoint when grpo.kl_beta > 0, else "".
	ReferenceCheckpoint string `json:"reference_checkpoint"`
	// AttnImplementation is the trainer's attention over packed
	// micro-batches: "" (flash_attention_2 on CUDA with flash_attn
	// installed, else varlen_sdpa: SDPA per packed sample,
	// trainer/spade_trainer/attention.py), varlen_sdpa, or transformers'
	// sdpa, eager, flash_attention_2, flash_attention_3, flex_attention.
	// grpo.attn_implementation.
	AttnImplementation string `json:"attn_implementation"`
	// GradientCheckpointing recomputes each layer's activations in the
	// backward pass (less memory, more compute);
	// grpo.gradient_checkpointing.
	GradientCheckpointing bool `json:"gradient_checkpointing"`
	// Offload puts parameters, gradients and optimizer state in CPU memory
	// between uses (FSDP2 CPUOffloadPolicy; torchrun only); grpo.offload.
	Offload bool `json:"offload"`
	// Compile runs the model under torch.compile when this torch has it
	// (torch >= 2). Fixed at false.
	Compile bool `json:"compile"`
	// ResumeOptimizer loads the fp32 master weights and AdamW state saved
	// with an input checkpoint directory (optimizer/, written by
	// torch.distributed.checkpoint). Fixed at true (a parent saved without
	// them starts a fresh AdamW).
	ResumeOptimizer bool `json:"resume_optimizer"`
	// SaveOptimizer writes them with the new checkpoint;
	// grpo.keep_optimizer_rounds > 0.
	SaveOptimizer bool `json:"save_optimizer"`
	// TISCap, when > 0, weights each trained token that has a sampler
	// log-prob by min(exp(logp_old - logp_sampler), TISCap), detached
	// (truncated importance sampling; the public code's --use-tis, cap
	// 2.0); 0 is off. grpo.tis_cap.
	TISCap float64 `json:"tis_cap"`
	// MismatchWarn is the mean |logp_trainer - logp_sampler| (nats) above
	// which the trainer warns on stderr; grpo.mismatch_warn, or
	// config.DefaultMismatchWarn when that is 0.
	MismatchWarn float64 `json:"mismatch_warn"`
	// LossAggregation is how the per-token terms are averaged:
	// "token_mean" (over every trained token of the batch) or
	// "sample_mean" (over each sample's trained tokens, then over the
	// samples; verl's seq-mean-token-mean, slime's default);
	// grpo.loss_aggregation.
	LossAggregation string `json:"loss_aggregation"`
	// TrainReasoning is "generated" (a trained turn's <think> block is
	// trained with it) or "none" (no token of a trained turn's <think>
	// block is trained, on the token-id path and the text path alike: the
	// tokens through the first </think> and the whitespace after it; they
	// stay in the context). grpo.train_reasoning.
	TrainReasoning string `json:"train_reasoning"`
	// AgentSamples is "play" (an agent row is one sample, every assistant
	// turn trained) or "turn" (each assistant turn of an agent row is a
	// sample of its own, trained in the context it was sampled in, with
	// the row's advantage and weight); grpo.agent_samples.
	AgentSamples string `json:"agent_samples"`
}

// NewTrainerConfig returns the trainer config for grpo settings g and the
// torch seed seed: every field set, from g where a grpo key controls it
// (grpo.lr, clip_eps, clip_eps_high, kl_beta, max_seq_len, adam_beta1,
// adam_beta2, weight_decay, dtype, save_dtype, max_tokens_per_micro_batch,
// gradient_checkpointing, attn_implementation, offload, tis_cap,
// mismatch_warn, loss_aggregation, train_reasoning, agent_samples;
// save_optimizer from keep_optimizer_rounds > 0; the KL
// reference from base_checkpoint when kl_beta > 0), else the fixed value
// TrainerConfig documents (grad_clip 1.0, inner_steps 1, micro_batch_size
// 1024, device auto, adam_eps 1e-8, overlong truncate_left, compile false,
// resume_optimizer true). It does not validate g (config.Validate does).
func NewTrainerConfig(g config.GRPO, seed int64) TrainerConfig {
	tc := TrainerConfig{
		LR: g.LR, ClipEpsilon: g.ClipEps, ClipEpsilonHigh: g.ClipEpsHigh, KLBeta: g.KLBeta,
		GradClip: 1.0, InnerSteps: 1, MicroBatchSize: 1024, MaxTokensPerMicroBatch: g.MaxTokensPerMicroBatch,
		Seed: seed, Dtype: g.Dtype, Device: "auto",
		WeightDecay: g.WeightDecay, AdamBeta1: g.AdamBeta1, AdamBeta2: g.AdamBeta2, AdamEps: 1e-8,
		MaxSeqLen: g.MaxSeqLen, Overlong: "truncate_left", SaveDtype: g.SaveDtype,
		AttnImplementation: g.AttnImplementation, GradientCheckpointing: g.GradientCheckpointing, Offload: g.Offload,
		Compile: false, ResumeOptimizer: true, SaveOptimizer: g.KeepOptimizerRounds > 0,
		TISCap: g.TISCap, MismatchWarn: config.DefaultMismatchWarn,
		LossAggregation: g.LossAggregation, TrainReasoning: g.TrainReasoning, AgentSamples: g.AgentSamples,
	}
	// A section read back pinned holds "" for a setting at its default
	// (config.GRPO's pin rule); the trainer takes the value itself.
	if tc.LossAggregation == "" {
		tc.LossAggregation = config.LossTokenMean
	}
	if tc.AgentSamples == "" {
		tc.AgentSamples = config.AgentSamplesPlay
	}
	if tc.TrainReasoning == "" {
		tc.TrainReasoning = config.TrainReasoningGenerated
	}

	if g.MismatchWarn > 0 {
		tc.MismatchWarn = g.MismatchWarn
	}
	if g.KLBeta > 0 {
		// The trainer's default reference is its input checkpoint, whose
		// log-probs equal the pre-step policy's: with one inner step the
		// k3 term and its gradient would be exactly 0. DeepSeekMath's
		// reference is the initial model.
		tc.ReferenceCheckpoint = g.BaseCheckpoint
	}
	return tc
}

// DefaultTrainerConfig returns NewTrainerConfig of config.Default()'s grpo
// settings with seed 0: lr 1e-5, clip 0.2, no KL, grad clip 1.0, one inner
// step, packed micro-batches of up to 16,384 tokens, weight decay 0 (a
// zero-advantage batch has a zero gradient), bf16 servable weights,
// optimizer state saved and resumed. A starting point for RunTrainer
// callers and tests that set a few fields; the grpo stage uses
// NewTrainerConfig.
func DefaultTrainerConfig() TrainerConfig {
	return NewTrainerConfig(config.Default().GRPO, 0)
}

// trainerConfig returns the trainer config of round ri of a run with
// config c: NewTrainerConfig of c.GRPO, the seed derived from the run seed
// and the round.
func trainerConfig(c *config.Config, ri pipeline.RoundInfo) TrainerConfig {
	return NewTrainerConfig(c.GRPO, pipeline.DeriveSeed(ri.Seed, "grpo", ri.Round))
}

// encodeTrainerConfig is the bytes of the --config file: c as indented
// JSON (one space), keys in field order, and a final newline. The trainer
// records their sha256 in the checkpoint's spade_checkpoint.json, so this
// encoding is part of what a checkpoint's bytes depend on.
func encodeTrainerConfig(c TrainerConfig) ([]byte, error) {
	b, err := json.MarshalIndent(c, "", " ")
	if err != nil {
		return nil, fmt.Errorf("trainer config: %w", err)
	}
	return append(b, '\n'), nil
}

package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// This file holds grpo.*'s enums, default and check; grpo.go, the
// section's type, is the trainer's contract and kept apart.

// The values of grpo.trainer.
const (
	// TrainerNone trains nothing: every round's checkpoint is the base.
	TrainerNone = "none"
	// TrainerTorch runs the project's PyTorch trainer with grpo.python.
	TrainerTorch = "torch"
	// TrainerCommand runs grpo.command.
	TrainerCommand = "command"
)

// Trainers lists the values of grpo.trainer.
var Trainers = []string{TrainerNone, TrainerTorch, TrainerCommand}

// The values of grpo.launcher.
const (
	// LauncherLocal runs one trainer process (the default).
	LauncherLocal = "local"
	// LauncherTorchrun runs torch.distributed.run with FSDP2.
	LauncherTorchrun = "torchrun"
)

// Launchers lists the values of grpo.launcher.
var Launchers = []string{LauncherLocal, LauncherTorchrun}

// The values of grpo.train_reasoning.
const (
	// TrainReasoningGenerated trains the reasoning the model generated, in
	// a <think> block before the answer (the default).
	TrainReasoningGenerated = "generated"
	// TrainReasoningNone trains the answer only.
	TrainReasoningNone = "none"
)

// TrainReasonings lists the values of grpo.train_reasoning.
var TrainReasonings = []string{TrainReasoningGenerated, TrainReasoningNone}

// The values of grpo.loss_aggregation (docs/training.md "Loss"; the
// names of the peer frameworks' settings in parentheses).
const (
	// LossTokenMean averages over every trained token of the batch
	// (verl's "token-mean"; the default).
	LossTokenMean = "token_mean"
	// LossSampleMean averages each sample's trained tokens, then the
	// samples (verl's "seq-mean-token-mean"; slime's default, the public
	// SPADE code's).
	LossSampleMean = "sample_mean"
)

// LossAggregations lists the values of grpo.loss_aggregation.
var LossAggregations = []string{LossTokenMean, LossSampleMean}

// The values of grpo.agent_samples.
const (
	// AgentSamplesPlay trains each play as one sample (the default).
	AgentSamplesPlay = "play"
	// AgentSamplesTurn trains each assistant turn of a play as a sample
	// of its own, with the play's advantage.
	AgentSamplesTurn = "turn"
)

// AgentSampleKinds lists the values of grpo.agent_samples.
var AgentSampleKinds = []string{AgentSamplesPlay, AgentSamplesTurn}

// The values of grpo.designer_norm.
const (
	// DesignerNormNone leaves designer advantages unscaled (public code).
	DesignerNormNone = "none"
	// DesignerNormStd divides them by the role's standard deviation.
	DesignerNormStd = "std"
)

// DesignerNorms lists the values of grpo.designer_norm.
var DesignerNorms = []string{DesignerNormNone, DesignerNormStd}

// The kinds of grpo.weight_rule (ParseWeightRule); fixed is written
// fixed:X.
const (
	// WeightRuleRatio weights designer samples by the ratio rule (the
	// default).
	WeightRuleRatio = "ratio"
	// WeightRuleNone weights every designer sample 1.
	WeightRuleNone = "none"
	// WeightRuleFixed weights every designer sample X (fixed:X).
	WeightRuleFixed = "fixed"
)

// Dtypes are the values of grpo.dtype (space-separated); SaveDtypes
// those of grpo.save_dtype.
const (
	Dtypes     = "auto float32 bfloat16 float16"
	SaveDtypes = "float32 bfloat16 float16"
)

// DefaultGRPO is grpo.*'s default: no trainer, the tiny:0 base, the
// ratio weight rule, AdamW at lr 1e-5 (betas 0.9, 0.999), clip 0.2, no
// KL, the token-mean loss over whole-play agent samples, one local
// process, an hour per trainer run.
func DefaultGRPO() GRPO {
	return GRPO{Trainer: TrainerNone, Python: DefaultTrainerPython, BaseCheckpoint: "tiny:0", Eps: 1e-6, WeightRule: WeightRuleRatio, DesignerNorm: DesignerNormNone, MaxSeqLen: 8192, LR: 1e-5, ClipEps: 0.2, KLBeta: 0, TimeoutS: 3600, TrainReasoning: TrainReasoningGenerated,
		AdamBeta1: 0.9, AdamBeta2: 0.999, Dtype: "auto", SaveDtype: "bfloat16", MaxTokensPerMicroBatch: 16384,
		Launcher: LauncherLocal, NprocPerNode: 1, Nnodes: 1, KeepOptimizerRounds: 1, MismatchWarn: DefaultMismatchWarn,
		LossAggregation: LossTokenMean, AgentSamples: AgentSamplesPlay}
}

// pin implements pinner: grpo.loss_aggregation and grpo.agent_samples
// are pinned blank while at their defaults, so runs pinned before they
// existed keep their digest (and so do the grpo stage's fingerprints,
// which hash the pinned section).
func (g GRPO) pin() any {
	if g.LossAggregation == LossTokenMean {
		g.LossAggregation = ""
	}
	if g.AgentSamples == AgentSamplesPlay {
		g.AgentSamples = ""
	}
	return g
}

// unpin implements unpinner: each blank one of them is its default.
func (g GRPO) unpin() any {
	if g.LossAggregation == "" {
		g.LossAggregation = LossTokenMean
	}
	if g.AgentSamples == "" {
		g.AgentSamples = AgentSamplesPlay
	}
	return g
}

// Check checks grpo.*: finite numbers, counts and ranges, the enums, the
// launcher's needs, the base checkpoint (when a trainer runs), the weight
// rule and the trainer command.
func (g GRPO) Check() []Problem {
	var p problems
	p.finite("grpo", g)
	p.count("grpo.max_seq_len", g.MaxSeqLen)
	p.oneOf("grpo.train_reasoning", g.TrainReasoning, TrainReasonings)
	p.oneOf("grpo.loss_aggregation", g.LossAggregation, LossAggregations)
	p.oneOf("grpo.agent_samples", g.AgentSamples, AgentSampleKinds)
	p.countOrZero("grpo.designer_delay", g.DesignerDelay)
	p.atLeast("grpo.eps", g.Eps, 0, false)
	p.atLeast("grpo.lr", g.LR, 0, true)
	p.atLeast("grpo.clip_eps", g.ClipEps, 0, true)
	p.atLeast("grpo.kl_beta", g.KLBeta, 0, false)
	p.atLeast("grpo.clip_eps_high", g.ClipEpsHigh, 0, false)
	p.atLeast("grpo.weight_decay", g.WeightDecay, 0, false)
	p.atLeast("grpo.tis_cap", g.TISCap, 0, false)
	p.atLeast("grpo.mismatch_warn", g.MismatchWarn, 0, false)
	for _, b := range []struct {
		key string
		v   float64
	}{{"grpo.adam_beta1", g.AdamBeta1}, {"grpo.adam_beta2", g.AdamBeta2}} {
		if !(b.v >= 0 && b.v < 1) {
			p.add(fmt.Sprintf("%s must be in [0, 1) (got %g)", b.key, b.v), b.key)
		}
	}
	for _, d := range []struct{ key, v, want string }{
		{"grpo.dtype", g.Dtype, Dtypes},
		{"grpo.save_dtype", g.SaveDtype, SaveDtypes},
		{"grpo.launcher", g.Launcher, strings.Join(Launchers, " ")},
	} {
		if !slices.Contains(strings.Fields(d.want), d.v) {
			p.add(fmt.Sprintf("%s must be one of %s (got %q)", d.key, strings.ReplaceAll(d.want, " ", ", "), d.v), d.key)
		}
	}
	if a := g.AttnImplementation; a != "" && !slices.Contains(strings.Fields(AttnImplementations), a) {
		p.add(fmt.Sprintf("grpo.attn_implementation must be empty (the trainer's default) or one of %s (got %q)", strings.ReplaceAll(AttnImplementations, " ", ", "), a), "grpo.attn_implementation")
	}
	p.count("grpo.max_tokens_per_micro_batch", g.MaxTokensPerMicroBatch)
	p.count("grpo.nproc_per_node", g.NprocPerNode)
	p.count("grpo.nnodes", g.Nnodes)
	if g.KeepOptimizerRounds < 0 {
		p.add(fmt.Sprintf("grpo.keep_optimizer_rounds must be >= 0 (got %d)", g.KeepOptimizerRounds), "grpo.keep_optimizer_rounds")
	}
	if g.Launcher == LauncherTorchrun && g.Trainer != TrainerTorch && g.Trainer != TrainerNone {
		p.add("grpo.launcher torchrun runs the torch trainer: set grpo.trainer torch", "grpo.launcher", "grpo.trainer")
	}
	if g.Nnodes > 1 && g.RdzvEndpoint == "" {
		p.add("grpo.nnodes > 1 needs grpo.rdzv_endpoint (HOST:PORT of the c10d rendezvous)", "grpo.nnodes", "grpo.rdzv_endpoint")
	}
	p.timeout("grpo.timeout_s", g.TimeoutS)
	p.absPath("grpo.python", g.Python)
	// The trainer reads the checkpoint only at the end of round 1, and the
	// setting is pinned: a typo found there cost the round and the run.
	// Without a trainer the value is only the label of the base model's
	// checkpoint_id, and runs pinned with any label stay readable.
	if g.Trainer != TrainerNone {
		if seed, ok := strings.CutPrefix(g.BaseCheckpoint, "tiny:"); ok {
			if _, err := strconv.ParseUint(seed, 10, 64); err != nil {
				p.add(fmt.Sprintf("grpo.base_checkpoint %q: want tiny:SEED with SEED an integer in [0, 2^64) (or a checkpoint directory)", g.BaseCheckpoint), "grpo.base_checkpoint")
			}
		} else if strings.TrimSpace(g.BaseCheckpoint) == "" {
			p.add("grpo.base_checkpoint is empty: want tiny:SEED or a checkpoint directory", "grpo.base_checkpoint")
		}
	}
	if _, _, err := ParseWeightRule(g.WeightRule); err != nil {
		p.add("grpo.weight_rule: "+err.Error(), "grpo.weight_rule")
	}
	switch g.Trainer {
	case TrainerNone, TrainerTorch:
	case TrainerCommand:
		if len(g.Command) == 0 {
			p.add("grpo.trainer command needs grpo.command", "grpo.trainer", "grpo.command")
		} else if strings.TrimSpace(g.Command[0]) == "" {
			p.add("grpo.command[0], the program to run, is empty", "grpo.command")
		}
	default:
		p.oneOf("grpo.trainer", g.Trainer, Trainers)
	}
	p.oneOf("grpo.designer_norm", g.DesignerNorm, DesignerNorms)
	return p
}

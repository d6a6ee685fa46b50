package grpo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/reward"
	"github.com/spade-pipeline/spade/pipeline"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/trainer"
)

// Stage is the GRPO step of a round (docs/method.md step 8): it builds the train
// batch with advantages, runs the trainer, and registers the checkpoint the
// next round plays with.
type Stage struct {
	// WorkDir holds trainer scratch files; default os.TempDir().
	WorkDir string
	// Log receives the stage's warnings (a policy mismatch between the
	// server and the trainer); nil means slog.Default().
	Log *slog.Logger
	// BeforeTrain, when set, runs before the trainer does (not with
	// grpo.trainer none or an empty batch): `spade round` stops the
	// round's shared model server there, so that the trainer has the
	// accelerator to itself (docs/serving.md "One server per round").
	BeforeTrain func(ctx context.Context)
}

// Name implements pipeline.Stage.
func (*Stage) Name() string { return "grpo" }

// Outputs implements pipeline.Stage.
func (*Stage) Outputs() []pipeline.Output {
	return []pipeline.Output{{Table: "train_batch"}, {Table: "train_metrics"}, {Table: "checkpoints"}}
}

// Plan implements pipeline.Stage: rollouts, labels and the parent
// checkpoint, and the designs DesignerRound names, with what a delayed
// batch recomputes their reward from.
func (*Stage) Plan(ri pipeline.RoundInfo, c *config.Config) ([]pipeline.Input, bool) {
	if ri.Round < 1 {
		return nil, false
	}
	ins := []pipeline.Input{
		{Table: "rollouts", Round: ri.Round},
		{Table: "labels", Round: ri.Round},
		{Table: "checkpoints", Round: ri.Round - 1, Optional: ri.Round == 1},
	}
	if s, ok := DesignerRound(ri, c); ok {
		ins = append(ins, pipeline.Input{Table: "designs", Round: s})
		if s != ri.Round {
			// A delayed batch: the designs' environments (their reward
			// range) and the labels of the window s..r-1 (label(r) is
			// already an input).
			ins = append(ins, pipeline.Input{Table: "environments", Round: s})
			ins = append(ins, reward.HistoryInputs(s, ri.Round)...)
			if c.Label.DesignerRewardKind() == config.DesignerRewardLearningPotential {
				ins = append(ins, reward.HistoryInputs(1, s)...)
			}
		}
	}
	return ins, true
}

// DesignerRound says which round's designs grpo(r) trains: round r itself
// on a regeneration round without grpo.designer_delay; with delay d,
// round r-d when that round regenerated (and is >= 1); none with
// ablation.frozen_designer (the designer is not trained) or otherwise.
func DesignerRound(ri pipeline.RoundInfo, c *config.Config) (int, bool) {
	if c == nil || c.Ablation.FrozenDesigner {
		return 0, false
	}
	d := c.GRPO.DesignerDelay
	if d == 0 {
		return ri.Round, ri.Regeneration
	}
	s := ri.Round - d
	if s < 1 || !pipeline.NewRoundInfo(ri.Run, s, c).Regeneration {
		return 0, false
	}
	return s, true
}

// ConfigSubset implements pipeline.Stage: the GRPO settings, k, and the
// trainer code's digest (a trainer change is a different stage output).
func (*Stage) ConfigSubset(c *config.Config) any {
	g := c.GRPO
	digest := ""
	if g.Trainer == config.TrainerTorch {
		digest = trainer.Digest()
	}
	return struct {
		GRPO    config.GRPO
		K       int
		Trainer string
		// A delayed batch recomputes the designer reward; a frozen
		// designer trains no designer sample.
		Label          config.Label `json:",omitzero"`
		FrozenDesigner bool         `json:",omitempty"`
	}{g, c.RegenerateEvery, digest, delayedLabel(c), c.Ablation.FrozenDesigner}
}

// delayedLabel is the label settings a delayed batch depends on (the
// zero value without a delay, which leaves the fingerprint as it was).
func delayedLabel(c *config.Config) config.Label {
	if c.GRPO.DesignerDelay == 0 {
		return config.Label{}
	}
	return c.Label
}

// Parts implements pipeline.Stage.Parts: the stage is one part, and its
// error is always nil.
func (*Stage) Parts(context.Context, *pipeline.Env) (int, error) { return 1, nil }

// BuildBatch assembles the GRPO samples of a round: agent samples are the
// unhinted plays of admitted environments that have an assistant message
// (a play that failed before the agent's first turn is not a sample), one
// group per environment, reward = return; designer samples (regeneration
// rounds) are the design responses, grouped by skill, rewarded by the
// label stage's designer reward for a slot's final attempt and -1 for
// every earlier, failed attempt. Attempts without a response (model
// errors) are not samples, nor is the final attempt of a slot whose label
// has no designer reward (a valid environment left unmeasured because its
// hint call failed; docs/regret.md).
// It also returns the batch statistics (sample and group counts, the
// designer weight). Errors: GroupAdvantages' (wrapped as "agent
// advantages") and DesignerAdvantages' (wrapped as "designer
// advantages"), ErrShape or ErrNonFinite; a designs row whose prompt is
// not a JSON message list, naming the slot and attempt; ParseWeightRule's
// for a bad grpo.weight_rule.
func BuildBatch(cfg *config.Config, plays []schemas.Rollout, labels []schemas.Label, designs []schemas.Design) ([]schemas.TrainSample, map[string]float64, error) {
	admitted := map[string]bool{}
	for _, l := range labels {
		admitted[l.EnvID] = l.Admitted
	}
	var agent []schemas.TrainSample
	textless := 0
	for _, p := range plays {
		if p.Hinted || !admitted[p.EnvID] || !hasAssistant(p.Messages) {
			// A play without an assistant message (its environment failed
			// to load or reset, or the agent's first call failed) has no
			// tokens to train: like a design attempt without a response,
			// it is not a sample, and its group is the plays that are.
			continue
		}
		msgs, ok := TrainMessages(p.Messages, cfg.GRPO.TrainReasoning)
		if !ok {
			// With train_reasoning none, a turn that was all reasoning
			// would train an empty assistant turn the model never wrote.
			textless++
			continue
		}
		agent = append(agent, schemas.TrainSample{
			SampleID: fmt.Sprintf("agent-%s-%04d", p.EnvID, p.Sample), Role: "agent", Group: p.EnvID,
			Messages: msgs, Tools: p.Tools, Reward: p.Return, Weight: 1, MaskSource: "assistant_turns",
		})
	}
	sort.Slice(agent, func(a, b int) bool { return agent[a].SampleID < agent[b].SampleID })
	stats := map[string]float64{}
	if textless > 0 {
		stats["agent_plays_reasoning_only"] = float64(textless)
	}
	rewards := make([]float64, len(agent))
	groups := make([]string, len(agent))
	for i, s := range agent {
		rewards[i], groups[i] = s.Reward, s.Group
	}
	adv, gs, err := GroupAdvantages(rewards, groups, cfg.GRPO.Eps)
	if err != nil {
		return nil, nil, fmt.Errorf("agent advantages: %w", err)
	}
	for i := range agent {
		agent[i].Advantage = adv[i]
	}
	stats["agent_samples"] = float64(len(agent))
	stats["agent_groups"] = float64(gs.Groups)
	stats["zero_variance_groups"] = float64(gs.ZeroVariance)
	stats["singleton_groups"] = float64(gs.Singletons)

	des, w, err := DesignerSamples(cfg, designs, labels, len(agent))
	if err != nil {
		return nil, nil, err
	}
	if len(des) > 0 {
		stats["designer_weight"] = w
	}
	stats["designer_samples"] = float64(len(des))
	return append(agent, des...), stats, nil
}

// DesignerSamples builds the designer half of a batch (BuildBatch): one
// sample per design response, rewarded from the label of its slot
// (labels: the regeneration round's, or the rewards a delayed batch
// recomputed, DelayedLabels), centred per skill, weighted against
// agentSamples by grpo.weight_rule. It returns the samples and their
// weight (0 without samples). Errors are BuildBatch's.
func DesignerSamples(cfg *config.Config, designs []schemas.Design, labels []schemas.Label, agentSamples int) ([]schemas.TrainSample, float64, error) {
	rewardBySlot := map[string]float64{}
	unmeasured := map[string]bool{} // slots whose label has no designer reward
	for _, l := range labels {
		if l.DesignerReward != nil {
			rewardBySlot[l.SlotID] = *l.DesignerReward
		} else {
			unmeasured[l.SlotID] = true
		}
	}
	var des []schemas.TrainSample
	var skills []string
	for _, d := range designs {
		if d.Response == "" {
			continue
		}
		r := -1.0
		if d.Final {
			// The label of the slot is the label of this attempt's
			// environment, even when its quick check failed and full
			// validation passed (docs/regret.md); a final attempt without
			// a label of its own (no code, a repeated source) gets -1.
			v, ok := rewardBySlot[d.SlotID]
			if ok {
				r = v
			} else if unmeasured[d.SlotID] {
				// A valid environment nobody could measure (no hint, so
				// no regret): no reward, so not a sample.
				continue
			}
		}
		var msgs []schemas.Message
		if err := json.Unmarshal([]byte(d.Prompt), &msgs); err != nil {
			return nil, 0, fmt.Errorf("designs row %s attempt %d: field prompt: %w", d.SlotID, d.Attempt, err)
		}
		answer := d.Response
		if r, a := model.SplitThink(d.Response); r != "" {
			// Reasoning written in the content is in d.Reasoning already,
			// after the server's own reasoning field.
			answer = a
		}
		msgs = append(msgs, schemas.Message{Role: "assistant", Content: renderTurn(d.Reasoning, answer, cfg.GRPO.TrainReasoning),
			PromptTokens: d.PromptTokens, PromptTokenIDs: d.PromptTokenIDs, CompletionTokenIDs: d.CompletionTokenIDs, CompletionLogprobs: d.CompletionLogprobs})
		des = append(des, schemas.TrainSample{
			SampleID: fmt.Sprintf("designer-%s-%d", d.SlotID, d.Attempt), Role: "designer", Group: d.Skill,
			Messages: msgs, Reward: r, MaskSource: "last_assistant",
		})
		skills = append(skills, d.Skill)
	}
	if len(des) > 0 {
		rule, err := ParseWeightRule(cfg.GRPO.WeightRule)
		if err != nil {
			return nil, 0, err
		}
		dr := make([]float64, len(des))
		for i, s := range des {
			dr[i] = s.Reward
		}
		dadv, ds, err := DesignerAdvantages(dr, skills, DesignerOptions{
			Norm: DesignerNorm(cfg.GRPO.DesignerNorm), Eps: cfg.GRPO.Eps, Weight: rule,
			AgentSamples: agentSamples, RegenerationInterval: cfg.RegenerateEvery, WeightCap: DefaultWeightCap,
		})
		if err != nil {
			return nil, 0, fmt.Errorf("designer advantages: %w", err)
		}
		for i := range des {
			des[i].Advantage, des[i].Weight = dadv[i], ds.Weight
		}
		return des, ds.Weight, nil
	}
	return des, 0, nil
}

// TrainMessages is a play's transcript as the trainer sees it: each
// assistant turn's reasoning is rendered into its content per
// grpo.train_reasoning (renderTurn) and the Reasoning field is cleared,
// so train_batch holds exactly the trained text. ok is false when, with
// "none", an assistant turn that carried reasoning renders to no text
// and no tool call: training it would teach an empty turn the model did
// not produce.
func TrainMessages(msgs []schemas.Message, mode string) ([]schemas.Message, bool) {
	out := make([]schemas.Message, len(msgs))
	for i, m := range msgs {
		if m.Role == "assistant" {
			if mode == config.TrainReasoningNone && m.Reasoning != "" && strings.TrimSpace(m.Content) == "" && m.ToolCalls == "" {
				return nil, false
			}
			m.Content = renderTurn(m.Reasoning, m.Content, mode)
		}
		m.Reasoning = ""
		out[i] = m
	}
	return out, true
}

// renderTurn is one assistant turn's trained text: with mode "generated"
// and reasoning, "<think>\n" + reasoning + "\n</think>\n\n" + answer, the
// way Qwen3's chat template renders an assistant turn that reasoned (what
// the model generated); otherwise the answer alone.
func renderTurn(reasoning, answer, mode string) string {
	if mode != config.TrainReasoningGenerated || reasoning == "" {
		return answer
	}
	return model.ThinkOpen + "\n" + reasoning + "\n" + model.ThinkClose + "\n\n" + answer
}

// BatchSample is the trainer's batch line of a train_batch row: tool
// calls in OpenAI's format, tools declared, and each assistant turn's
// sampled token ids, sampler log-probs and whole prompt ids (decoded from
// the stored delta coding, schemas.ExpandPrompts). Errors name the
// sample and the field: stored tool calls or tools that are not JSON, a
// prompt delta that does not decode.
func BatchSample(b schemas.TrainSample) (Sample, error) {
	prompts, err := schemas.ExpandPrompts(b.Messages)
	if err != nil {
		return Sample{}, fmt.Errorf("train_batch sample %s: %w", b.SampleID, err)
	}
	msgs := make([]Message, len(b.Messages))
	for j, m := range b.Messages {
		out := Message{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID,
			CompletionTokenIDs: m.CompletionTokenIDs, CompletionLogprobs: m.CompletionLogprobs, PromptTokenIDs: prompts[j]}
		if m.ToolCalls != "" {
			var calls []model.ToolCall
			if err := json.Unmarshal([]byte(m.ToolCalls), &calls); err != nil {
				return Sample{}, fmt.Errorf("train_batch sample %s: messages[%d]: field tool_calls: %w", b.SampleID, j, err)
			}
			for _, c := range calls {
				out.ToolCalls = append(out.ToolCalls, ToolCall{ID: c.ID, Type: "function", Function: ToolFunction{Name: c.Name, Arguments: c.Arguments}})
			}
		}
		msgs[j] = out
	}
	smp := Sample{SampleID: b.SampleID, Role: b.Role, Group: b.Group, Messages: msgs, Reward: b.Reward, Advantage: b.Advantage, Weight: b.Weight}
	if strings.TrimSpace(b.Tools) != "" {
		if !json.Valid([]byte(b.Tools)) {
			return Sample{}, fmt.Errorf("train_batch sample %s: field tools: not JSON", b.SampleID)
		}
		smp.Tools = json.RawMessage(b.Tools)
	}
	return smp, nil
}

// hasAssistant reports whether msgs has an assistant message, the tokens
// the trainer trains an agent sample on.
func hasAssistant(msgs []schemas.Message) bool {
	for _, m := range msgs {
		if m.Role == "assistant" {
			return true
		}
	}
	return false
}

// Run implements pipeline.Stage.Run. It writes the batch, its metrics and
// one checkpoints row: the parent carried over with trainer none or an
// empty batch, else the checkpoint the trainer made, whose files it
// stores under the round's checkpoints/files/ (an object already at a
// file's key, left by an earlier attempt, is kept only when its sha256 is
// the trained file's). Errors: reading an input
// (pipeline.ReadAll: the store's error, pipeline.ErrIntegrity,
// table.ErrCorrupt, a schema mismatch); BuildBatch's; more than one
// checkpoints row in round r-1; and, when it trains: a work-directory,
// trainer-extraction or checkpoint-file error from the file system
// (unwrapped), a parent checkpoint whose file names are unsafe or whose
// files fail pipeline.ReadVerified (naming the checkpoint), RunTrainer's
// (ErrTrainerFailed, ErrTrainerInput, ErrBadMetrics, ErrNoCheckpoint, or
// ctx.Err() wrapped, context.DeadlineExceeded once grpo.timeout_s seconds
// have passed), a failed store write other than storage.ErrExists
// (wrapped as "store checkpoint file <key>"), and for a file already in
// the store, sameContent's: a read error ("verify checkpoint file <key>")
// or a sha256 other than the trained one.
func (s *Stage) Run(ctx context.Context, env *pipeline.Env, _ int, out *pipeline.Out) error {
	ri := env.Round
	plays, err := pipeline.ReadAll(ctx, env, schemas.Rollouts, "rollouts", ri.Round)
	if err != nil {
		return err
	}
	labels, err := pipeline.ReadAll(ctx, env, schemas.Labels, "labels", ri.Round)
	if err != nil {
		return err
	}
	batch, stats, err := BuildBatch(env.Config, plays, labels, nil)
	if err != nil {
		return err
	}
	for i := range batch {
		batch[i].SampledRound = int64(ri.Round)
	}
	if sr, ok := DesignerRound(ri, env.Config); ok {
		designs, err := pipeline.ReadAll(ctx, env, schemas.Designs, "designs", sr)
		if err != nil {
			return err
		}
		dl := labels
		if sr != ri.Round {
			if dl, err = readDelayedLabels(ctx, env, sr); err != nil {
				return err
			}
			stats["designer_delayed_from"] = float64(sr)
		}
		des, w, err := DesignerSamples(env.Config, designs, dl, int(stats["agent_samples"]))
		if err != nil {
			return err
		}
		for i := range des {
			des[i].SampledRound = int64(sr)
		}
		if len(des) > 0 {
			stats["designer_weight"] = w
		}
		stats["designer_samples"] = float64(len(des))
		batch = append(batch, des...)
	}
	tokenIDs := 0
	for _, b := range batch {
		if TokenIDSample(b) {
			tokenIDs++
		}
	}
	stats["token_id_samples"], stats["text_samples"] = float64(tokenIDs), float64(len(batch)-tokenIDs)
	pipeline.Emit(out, schemas.TrainBatch, "train_batch", batch...)
	parents, err := pipeline.ReadAll(ctx, env, schemas.Checkpoints, "checkpoints", ri.Round-1)
	if err != nil {
		return err
	}
	parent := schemas.Checkpoint{CheckpointID: "base:" + env.Config.GRPO.BaseCheckpoint, Trainer: "base"}
	if len(parents) == 1 {
		parent = parents[0]
	} else if len(parents) > 1 {
		return fmt.Errorf("checkpoints of round %d has %d rows, want 1", ri.Round-1, len(parents))
	}
	metric := func(name string, v float64) {
		pipeline.Emit(out, schemas.TrainMetrics, "train_metrics", schemas.TrainMetric{Step: 0, Name: name, Value: v})
	}
	for k, v := range stats {
		metric(k, v)
	}
	if env.Config.GRPO.Trainer == config.TrainerNone || len(batch) == 0 {
		// No training: the batch is still written, the model carries over.
		metric("trained", 0)
		pipeline.Emit(out, schemas.Checkpoints, "checkpoints", parent)
		if len(batch) == 0 {
			out.Stat("grpo", "empty batch: nothing to train")
		} else {
			out.Stat("grpo", "trainer none: batch written, model unchanged")
		}
		return nil
	}
	if s.BeforeTrain != nil {
		s.BeforeTrain(ctx)
	}
	ck, steps, err := s.train(ctx, env, batch, parent)
	if err != nil {
		return err
	}
	metric("trained", 1)
	if len(steps) > 0 {
		s.warnMismatch(env, steps[0])
	}
	for _, st := range steps {
		pipeline.Emit(out, schemas.TrainMetrics, "train_metrics", stepMetricRows(st, env.Config.Observe.Timings)...)
		out.Stat(fmt.Sprintf("step%d_tokens_per_s", st.Step), st.TokensPerS)
		out.Stat(fmt.Sprintf("step%d_peak_memory_bytes", st.Step), st.PeakMemoryBytes)
	}
	pipeline.Emit(out, schemas.Checkpoints, "checkpoints", ck)
	return nil
}

// TokenIDSample reports whether every trained assistant turn of s (every
// assistant turn of an agent sample, the last assistant message of a
// designer sample) carries the server's sampled token ids, so that the
// trainer trains on those ids rather than on the text.
func TokenIDSample(s schemas.TrainSample) bool {
	last := -1
	for i, m := range s.Messages {
		if m.Role != "assistant" {
			continue
		}
		last = i
		if s.Role == "agent" && len(m.CompletionTokenIDs) == 0 {
			return false
		}
	}
	return last >= 0 && len(s.Messages[last].CompletionTokenIDs) > 0
}

// train runs the trainer from parent and stores the new checkpoint's files
// beside the checkpoints table (content-verified, put-if-absent).
func (s *Stage) train(ctx context.Context, env *pipeline.Env, batch []schemas.TrainSample, parent schemas.Checkpoint) (schemas.Checkpoint, []StepMetrics, error) {
	cfg := env.Config.GRPO
	work := s.WorkDir
	if work == "" {
		work = os.TempDir()
	}
	dir, err := os.MkdirTemp(work, "spade-grpo-")
	if err != nil {
		return schemas.Checkpoint{}, nil, err
	}
	defer os.RemoveAll(dir)
	init := cfg.BaseCheckpoint
	if len(parent.Files) > 0 {
		init = filepath.Join(dir, "parent")
		if err := fetchCheckpoint(ctx, env.Store(), parent, init); err != nil {
			return schemas.Checkpoint{}, nil, err
		}
	}
	samples := make([]Sample, len(batch))
	for i, b := range batch {
		smp, err := BatchSample(b)
		if err != nil {
			return schemas.Checkpoint{}, nil, err
		}
		samples[i] = smp
	}
	tc := trainerConfig(env.Config, env.Round)
	spec := TrainerSpec{Checkpoint: init, OutputDir: filepath.Join(dir, "out"), WorkDir: filepath.Join(dir, "work"), Samples: samples, Config: tc}
	if cfg.Trainer == config.TrainerCommand {
		spec.Command = cfg.Command
	} else {
		// The configured interpreter runs the embedded trainer: extract it
		// (RunTrainer does so only for its default command).
		spec.Command = TorchCommand(cfg, fmt.Sprintf("spade-%s-r%d", env.Round.Run, env.Round.Round))
		spec.PythonPath = filepath.Join(dir, "python")
		if err := trainer.WriteTo(spec.PythonPath); err != nil {
			return schemas.Checkpoint{}, nil, err
		}
	}
	tctx, cancel := context.WithTimeout(ctx, time.Duration(cfg.TimeoutS*float64(time.Second)))
	defer cancel()
	res, err := RunTrainer(tctx, spec)
	if err != nil {
		return schemas.Checkpoint{}, nil, err
	}
	h := sha256.New()
	for _, f := range res.Files {
		fmt.Fprintf(h, "%s %s\n", f.Name, f.SHA256)
	}
	id := hex.EncodeToString(h.Sum(nil))[:16]
	ck := schemas.Checkpoint{CheckpointID: id, TrainedRound: int64(env.Round.Round), Parent: parent.CheckpointID, Trainer: cfg.Trainer}
	for _, f := range res.Files {
		key := fmt.Sprintf("%s/checkpoints/files/%s/%s", pipeline.RoundDir(env.Round.Run, env.Round.Round), id, f.Name)
		data, err := os.ReadFile(filepath.Join(spec.OutputDir, f.Name))
		if err != nil {
			return schemas.Checkpoint{}, nil, err
		}
		if err := env.Store().PutIfAbsent(ctx, key, bytes.NewReader(data), int64(len(data))); isExists(err) {
			// An earlier attempt of this round stored the same files (the
			// id hashes their digests); keep it only if it is what we hold.
			if err := sameContent(ctx, env.Store(), key, f.SHA256); err != nil {
				return schemas.Checkpoint{}, nil, err
			}
		} else if err != nil {
			return schemas.Checkpoint{}, nil, fmt.Errorf("store checkpoint file %s: %w", key, err)
		}
		ck.Files = append(ck.Files, schemas.CheckpointFile{Name: f.Name, Key: key, SHA256: f.SHA256, Bytes: f.Bytes})
	}
	return ck, res.Steps, nil
}

// TorchCommand is the argv prefix that runs the embedded torch trainer for
// grpo settings g: `PYTHON -m spade_trainer` with launcher local, or with
// launcher torchrun `[COMMAND...] PYTHON -m torch.distributed.run
// --nnodes N --nproc_per_node P (--standalone | --rdzv_backend c10d
// --rdzv_endpoint E --rdzv_id ID) -m spade_trainer`, where COMMAND is
// grpo.command (a prefix such as srun) and ID is grpo.rdzv_id or rdzvID.
// torch.distributed.run is what the torchrun script runs (PyTorch's
// elastic launcher docs).
func TorchCommand(g config.GRPO, rdzvID string) []string {
	if g.Launcher != config.LauncherTorchrun {
		return []string{g.Python, "-m", trainer.Package}
	}
	argv := append([]string(nil), g.Command...)
	argv = append(argv, g.Python, "-m", "torch.distributed.run",
		"--nnodes", fmt.Sprint(g.Nnodes), "--nproc_per_node", fmt.Sprint(g.NprocPerNode))
	if g.RdzvEndpoint == "" {
		argv = append(argv, "--standalone")
	} else {
		if g.RdzvID != "" {
			rdzvID = g.RdzvID
		}
		argv = append(argv, "--rdzv_backend", "c10d", "--rdzv_endpoint", g.RdzvEndpoint, "--rdzv_id", rdzvID)
	}
	return append(argv, "-m", trainer.Package)
}

// fetchCheckpoint copies a stored checkpoint into dir, verifying sha256
// (pipeline.ReadCheckpointFile: a file `spade gc` removed by a retention
// rule is an error wrapping pipeline.ErrRemovedByGC).
// Each file goes to its Name (slash-separated, relative, as HashCheckpoint
// records it) under dir, subdirectories included. It checks every name
// before it writes anything: an empty, absolute or non-local name (one
// with a ".." element, or not clean), "." or a name listed twice is an error
// naming the checkpoint and the file, so no file lands outside dir or
// overwrites another.
func fetchCheckpoint(ctx context.Context, st storage.Store, ck schemas.Checkpoint, dir string) error {
	paths := make([]string, len(ck.Files))
	seen := map[string]bool{}
	for i, f := range ck.Files {
		rel, err := filepath.Localize(f.Name)
		if err == nil && rel == "." {
			err = errors.New("names the checkpoint directory itself")
		}
		if err != nil {
			return fmt.Errorf("checkpoint %s: file name %q: want a clean relative slash-separated path inside the checkpoint: %w", ck.CheckpointID, f.Name, err)
		}
		if seen[f.Name] {
			return fmt.Errorf("checkpoint %s: file name %q is listed twice", ck.CheckpointID, f.Name)
		}
		seen[f.Name] = true
		paths[i] = filepath.Join(dir, rel)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i, f := range ck.Files {
		data, err := pipeline.ReadCheckpointFile(ctx, st, pipeline.FileEntry{Key: f.Key, SHA256: f.SHA256, Bytes: f.Bytes})
		if err != nil {
			return fmt.Errorf("checkpoint %s: %w", ck.CheckpointID, err)
		}
		if err := os.MkdirAll(filepath.Dir(paths[i]), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(paths[i], data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func isExists(err error) bool { return errors.Is(err, storage.ErrExists) }

// sameContent checks that the stored object key has the hex sha256 want;
// errors name the key: a read error, or a different digest (a checkpoint
// file changed in the store since an earlier attempt wrote it).
func sameContent(ctx context.Context, s storage.Store, key, want string) error {
	r, err := s.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("verify checkpoint file %s: %w", key, err)
	}
	defer r.Close()
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return fmt.Errorf("verify checkpoint file %s: %w", key, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("checkpoint file %s is already in the store with sha256 %s, not the trained %s: it was changed after an earlier attempt wrote it; remove it to retrain", key, got, want)
	}
	return nil
}

// readDelayedLabels reads what a delayed batch of grpo(r) rewards the
// designs of round sr with: environments(sr), the labels of rounds
// sr..r-1 and, for learning_potential, the baselines after rounds 1..r-1;
// DelayedLabels computes the rewards. Errors are pipeline.ReadAll's,
// unwrapped.
func readDelayedLabels(ctx context.Context, env *pipeline.Env, sr int) ([]schemas.Label, error) {
	envs, err := pipeline.ReadAll(ctx, env, schemas.Environments, "environments", sr)
	if err != nil {
		return nil, err
	}
	var window [][]schemas.Label
	for r := sr; r < env.Round.Round; r++ {
		ls, err := pipeline.ReadAll(ctx, env, schemas.Labels, "labels", r)
		if err != nil {
			return nil, err
		}
		window = append(window, ls)
	}
	var base map[string]reward.EMA
	if env.Config.Label.DesignerRewardKind() == config.DesignerRewardLearningPotential {
		if base, err = reward.ReadBaselines(ctx, env, 1, env.Round.Round); err != nil {
			return nil, err
		}
	}
	return DelayedLabels(env.Config, envs, window, base), nil
}

// DelayedLabels recomputes the designer reward of the environments of a
// regeneration round s when grpo.designer_delay trains their designs in
// round s+d (public code: spade/core/utils/delayed_env_rewards.py,
// recompute_delayed_env_rewards_*). window holds the labels of rounds
// s..s+d-1, round s first; base the skills' learning-potential averages
// after round s+d-1. For each environment of round s's labels:
//
//   - the win rate is the mean of its win rates over the rounds of the
//     window it was played in (each round plays it rollout.group_size
//     times, so this is the pooled win rate of those plays; environments
//     left out of the pool have round s only);
//   - the regret is round s's, measured at the same time as its hinted
//     plays (the public blend's "matched timing": pooling later unhinted
//     plays against earlier hinted ones would bias it down);
//
// and reward.DesignerRewardOf combines them under label.designer_reward.
// The returned rows are round s's labels with DesignerReward replaced;
// a window without round s's labels gives none.
func DelayedLabels(cfg *config.Config, envs []schemas.Environment, window [][]schemas.Label, base map[string]reward.EMA) []schemas.Label {
	if len(window) == 0 {
		return nil
	}
	width := map[string]float64{}
	for _, e := range envs {
		width[e.EnvID] = e.RewardHigh - e.RewardLow
	}
	sum := map[string]float64{}
	rounds := map[string]int{}
	for _, ls := range window {
		for _, l := range ls {
			if l.Plays > 0 {
				sum[l.EnvID] += l.WinRate
				rounds[l.EnvID]++
			}
		}
	}
	out := make([]schemas.Label, 0, len(window[0]))
	for _, l := range window[0] {
		l.DesignerReward = nil
		in := reward.RewardInput{Valid: l.Valid, Regret: l.Regret, Width: width[l.EnvID], Unhinted: rounds[l.EnvID] * cfg.Rollout.GroupSize, Baseline: base[l.Skill].Baseline()}
		if n := rounds[l.EnvID]; n > 0 {
			in.WinRate = sum[l.EnvID] / float64(n)
		}
		if r, ok := reward.DesignerRewardOf(cfg.Label, in); ok {
			l.DesignerReward = &r
		}
		out = append(out, l)
	}
	return out
}

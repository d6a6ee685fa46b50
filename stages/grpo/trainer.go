package grpo

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/trainer"
)

// DefaultPython is the interpreter of the default trainer command: the
// pinned virtual environment's (config.DefaultTrainerPython, created by
// `make venv` from requirements.txt with torch and transformers).
const DefaultPython = config.DefaultTrainerPython

// DefaultCommand returns the default trainer argv prefix,
// `/opt/spade/venv/bin/python -m spade_trainer`; RunTrainer appends the
// protocol flags.
func DefaultCommand() []string { return []string{DefaultPython, "-m", trainer.Package} }

// Sentinel errors of RunTrainer, for callers that branch (all wrapped with
// the command and the captured output tail).
var (
	// ErrTrainerFailed: the command exited non-zero (or could not start).
	ErrTrainerFailed = errors.New("trainer failed")
	// ErrTrainerInput: the command exited with status 2, the trainer's
	// "bad input or usage" status (bad batch row, config key, checkpoint).
	ErrTrainerInput = errors.New("trainer rejected its input")
	// ErrBadMetrics: a metrics line is not a JSON object of numbers, or no
	// step metrics were written.
	ErrBadMetrics = errors.New("bad trainer metrics")
	// ErrNoCheckpoint: the output directory lacks config.json or a
	// *.safetensors weights file after a successful exit.
	ErrNoCheckpoint = errors.New("trainer wrote no checkpoint")
)

// Message is one chat turn of a training sample (OpenAI chat roles:
// system, user, assistant, tool), as the trainer's batch file carries it
// (docs/training.md "Batch file"). It is not schemas.Message (the stored
// row: tool calls as JSON text, prompt ids delta-coded, a Reasoning
// column) nor model.Message (the backend interface's, without token
// ids): the trainer reads OpenAI's nested tool_calls, each turn's whole
// prompt ids, and the reasoning already rendered into Content per
// grpo.train_reasoning.
type Message struct {
	// Role is "system", "user", "assistant" or "tool".
	Role string `json:"role"`
	// Content is the message text (for an assistant turn that called a
	// tool, the text beside the call).
	Content string `json:"content"`
	// ToolCalls are an assistant turn's tool calls in OpenAI's format; the
	// trainer renders them with the checkpoint's chat template
	// (docs/training.md "Batch file").
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID links a "tool" message to the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// CompletionTokenIDs are the token ids the server sampled for an
	// assistant turn; when every trained turn of a sample has them, the
	// trainer trains on exactly these ids (docs/training.md "Training on
	// the sampled tokens").
	CompletionTokenIDs []int64 `json:"completion_token_ids,omitempty"`
	// CompletionLogprobs are the sampler's log-probs of CompletionTokenIDs
	// (the mismatch report and truncated importance sampling).
	CompletionLogprobs []float64 `json:"completion_logprobs,omitempty"`
	// PromptTokenIDs is the turn's whole prompt as the server rendered it
	// (schemas.ExpandPrompts of the stored delta coding).
	PromptTokenIDs []int64 `json:"prompt_token_ids,omitempty"`
}

// ToolCall is one tool call of a batch message, in OpenAI's chat format.
type ToolCall struct {
	// ID is the call's id.
	ID string `json:"id"`
	// Type is "function".
	Type string `json:"type"`
	// Function names the function and carries its arguments.
	Function ToolFunction `json:"function"`
}

// ToolFunction is a tool call's function: its name and its arguments as
// the JSON text the model wrote.
type ToolFunction struct {
	// Name is the function name.
	Name string `json:"name"`
	// Arguments is the JSON text of the arguments.
	Arguments string `json:"arguments"`
}

// Sample is one line of the trainer's batch file and one row of the
// train_batch table. Role is "agent" (an unhinted play; Group = env_id) or
// "designer" (a generation response; Group = skill). The trainer trains on
// the role's own tokens: every assistant turn of an agent play, the last
// assistant message of a designer sample. Advantage comes from
// GroupAdvantages / DesignerAdvantages; Weight (>= 0) scales the sample's
// policy-gradient term; Reward is carried for inspection only.
type Sample struct {
	// SampleID identifies the sample (train_batch.sample_id); unique in a
	// batch.
	SampleID string `json:"sample_id"`
	// Role is "agent" or "designer".
	Role string `json:"role"`
	// Group is the GRPO group: the env_id (agent) or the skill (designer).
	Group string `json:"group"`
	// Messages is the chat to train on; it needs an assistant message.
	Messages []Message `json:"messages"`
	// Tools are the tools the chat declared, in OpenAI's format (a JSON
	// list; nil when none): the trainer passes them to the chat template.
	Tools json.RawMessage `json:"tools,omitempty"`
	// Reward is the sample's reward (finite; not used by the loss).
	Reward float64 `json:"reward"`
	// Advantage is the sample's GRPO advantage (finite).
	Advantage float64 `json:"advantage"`
	// Weight scales the sample's policy-gradient term (finite, >= 0).
	Weight float64 `json:"weight"`
}

// Validate checks the fields the trainer would reject, so a bad batch fails
// before a process (and a GPU) is started. Errors name the field.
func (s Sample) Validate() error {
	switch {
	case s.SampleID == "":
		return errors.New("field sample_id: empty")
	case s.Role != "agent" && s.Role != "designer":
		return fmt.Errorf("field role: %q: want agent or designer", s.Role)
	case s.Group == "":
		return errors.New("field group: empty")
	case len(s.Messages) == 0:
		return errors.New("field messages: empty")
	}
	hasAssistant := false
	for i, m := range s.Messages {
		switch m.Role {
		case "assistant":
			hasAssistant = true
		case "system", "user", "tool":
		default:
			return fmt.Errorf("field messages[%d].role: %q: want system, user, assistant or tool", i, m.Role)
		}
	}
	if !hasAssistant {
		return errors.New("field messages: no assistant message to train on")
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"reward", s.Reward}, {"advantage", s.Advantage}, {"weight", s.Weight}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("field %s: %v is not finite", f.name, f.v)
		}
	}
	if s.Weight < 0 {
		return fmt.Errorf("field weight: %v must be >= 0", s.Weight)
	}
	return nil
}

// WriteBatch writes samples as JSON lines (the trainer's --batch file), in
// the given order. Errors name the sample index and id; sample ids must be
// unique.
func WriteBatch(w io.Writer, samples []Sample) error {
	seen := make(map[string]int, len(samples))
	bw := bufio.NewWriter(w)
	for i, s := range samples {
		if err := s.Validate(); err != nil {
			return fmt.Errorf("batch sample %d (%s): %w", i, s.SampleID, err)
		}
		if j, ok := seen[s.SampleID]; ok {
			return fmt.Errorf("batch sample %d: sample_id %q duplicates sample %d", i, s.SampleID, j)
		}
		seen[s.SampleID] = i
		b, err := json.Marshal(s)
		if err != nil {
			return fmt.Errorf("batch sample %d: %w", i, err)
		}
		b = append(b, '\n')
		if _, err := bw.Write(b); err != nil {
			return fmt.Errorf("write batch sample %d: %w", i, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write batch: %w", err)
	}
	return nil
}

// MetricsSource says where the trainer writes its metrics lines.
type MetricsSource string

const (
	// MetricsFile means RunTrainer passes --metrics WORKDIR/metrics.jsonl and
	// reads it after exit (the default; stdout stays free for logs).
	MetricsFile MetricsSource = "file"
	// MetricsStdout means lines of stdout that start with '{' are metrics; other
	// lines are logs. For user commands that cannot take --metrics.
	MetricsStdout MetricsSource = "stdout"
)

// TrainerSpec is one trainer invocation.
type TrainerSpec struct {
	// Command is the argv prefix; nil means DefaultCommand(). RunTrainer
	// appends --batch, --checkpoint, --output, --config and, with
	// MetricsFile, --metrics.
	Command []string
	// PythonPath is prepended to PYTHONPATH. With the default command and
	// PythonPath "", the embedded trainer is extracted to WorkDir/python.
	PythonPath string
	// Env holds extra KEY=VALUE variables on top of the inherited
	// environment (e.g. CUDA_VISIBLE_DEVICES).
	Env []string
	// Checkpoint is the input checkpoint directory or "tiny:SEED".
	Checkpoint string
	// OutputDir receives the new checkpoint; it must be absent or empty.
	OutputDir string
	// WorkDir receives batch.jsonl, config.json and metrics.jsonl; created
	// if absent.
	WorkDir string
	// Samples is the batch, written in this order.
	Samples []Sample
	// Config is written to WorkDir/config.json (every key; the trainer
	// refuses a missing one); build it with NewTrainerConfig or start from
	// DefaultTrainerConfig.
	Config TrainerConfig
	// Metrics is where metrics come from; "" means MetricsFile.
	Metrics MetricsSource
	// TailBytes bounds the captured output tail; 0 means 16 KiB.
	TailBytes int
	// KillGrace is how long after ctx is done the process group gets
	// before its pipes are closed; 0 means 5 s.
	KillGrace time.Duration
}

// StepMetrics is one metrics line of an optimiser step (docs/training.md
// "Metrics"). Raw keeps the full line, including keys added later.
// TokensPerS, Seconds and PeakMemoryBytes are measurements and differ
// between identical runs.
type StepMetrics struct {
	// Step is the inner optimiser step, from 1.
	Step int `json:"step"`
	// Loss is the step's loss: the policy-gradient term plus kl_beta x KL,
	// a mean over the batch's trained tokens.
	Loss float64 `json:"loss"`
	// KL is the k3 estimate of KL(policy || reference), a mean over the
	// trained tokens; 0 on the first step with the default reference. The
	// project's trainer writes it null when kl_beta is 0 (not computed),
	// which leaves KL 0 here and the train_metrics row out
	// (stepMetricRows).
	KL float64 `json:"kl"`
	// ClipFraction is the share of trained tokens whose clipped branch was
	// active (A > 0 with ratio > 1+eps, or A < 0 with ratio < 1-eps).
	ClipFraction float64 `json:"clip_fraction"`
	// GradNorm is the global gradient L2 norm before clipping.
	GradNorm float64 `json:"grad_norm"`
	// Tokens counts all non-pad tokens forwarded; TrainedTokens those in
	// the loss (the role's own tokens).
	Tokens int64 `json:"tokens"`
	// TrainedTokens counts the tokens in the loss (see Tokens).
	TrainedTokens int64 `json:"trained_tokens"`
	// TokensPerS is Tokens divided by Seconds; the project's trainer
	// writes it null (no row) when Seconds is 0.
	TokensPerS float64 `json:"tokens_per_s"`
	// Seconds is the step's wall-clock time.
	Seconds float64 `json:"seconds"`
	// PeakMemoryBytes is the peak CUDA allocation on the device, or the
	// process's peak resident set size on CPU, in bytes.
	PeakMemoryBytes int64 `json:"peak_memory_bytes"`
	// LR is the optimiser's learning rate at the step.
	LR float64 `json:"lr"`
	// MicroBatches is the number of forward/backward passes the step's
	// gradient was accumulated over.
	MicroBatches int64 `json:"micro_batches"`
	// LogprobMismatchMean and LogprobMismatchMax are the mean and largest
	// |logp_trainer - logp_sampler| (nats) over the trained tokens that
	// carry a sampler log-prob, measured on the first inner step
	// (docs/training.md "Training on the sampled tokens"). When none does
	// (SamplerLogprobTokens 0) the trainer writes them null, they read 0
	// here, and train_metrics has no row for them (stepMetricRows).
	LogprobMismatchMean float64 `json:"logprob_mismatch_mean"`
	// LogprobMismatchMax: see LogprobMismatchMean.
	LogprobMismatchMax float64 `json:"logprob_mismatch_max"`
	// SamplerLogprobTokens counts the tokens compared.
	SamplerLogprobTokens int64 `json:"sampler_logprob_tokens"`
	// TISClipFraction is the share of those tokens whose importance
	// weight the tis_cap bound; null in the line (0 here, no row) with
	// tis_cap 0 or no such token.
	TISClipFraction float64 `json:"tis_clip_fraction"`
	// Raw is the metrics line as read, including keys StepMetrics has no
	// field for; the grpo stage stores only the fields above in
	// train_metrics, so such keys are not stored, and only those the line
	// carries with a value (not absent, not null).
	Raw json.RawMessage `json:"-"`
}

// CheckpointFile is one file of the new checkpoint, Name relative to the
// output directory (slash-separated).
type CheckpointFile struct {
	// Name is the file's path relative to the output directory.
	Name string `json:"name"`
	// SHA256 is the hex sha256 of the file's bytes.
	SHA256 string `json:"sha256"`
	// Bytes is the file's size in bytes.
	Bytes int64 `json:"bytes"`
}

// TrainResult is what a successful RunTrainer returns.
type TrainResult struct {
	// Files lists the checkpoint's regular files sorted by name.
	Files []CheckpointFile
	// Steps holds one entry per optimiser step, in order.
	Steps []StepMetrics
	// Events holds other metrics lines (objects with an "event" key, e.g.
	// the final {"event":"done",...}), raw.
	Events []json.RawMessage
	// OutputTail is the end of the command's stderr and non-metrics stdout.
	OutputTail string
}

// ParseMetricsLine parses one metrics JSON line. It returns (m, false, nil)
// for a step line, (zero, true, nil) for an event line (has an "event"
// key), and an ErrBadMetrics error when the line is not a JSON object, a
// known key has the wrong type, or a step line lacks "step".
func ParseMetricsLine(line []byte) (StepMetrics, bool, error) {
	line = bytes.TrimSpace(line)
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(line, &probe); err != nil || probe == nil {
		return StepMetrics{}, false, fmt.Errorf("%w: not a JSON object: %.80q", ErrBadMetrics, line)
	}
	if _, ok := probe["event"]; ok {
		return StepMetrics{}, true, nil
	}
	if _, ok := probe["step"]; !ok {
		return StepMetrics{}, false, fmt.Errorf("%w: no \"step\" key: %.80q", ErrBadMetrics, line)
	}
	var m StepMetrics
	if err := json.Unmarshal(line, &m); err != nil {
		return StepMetrics{}, false, fmt.Errorf("%w: %w: %.80q", ErrBadMetrics, err, line)
	}
	m.Raw = append(json.RawMessage(nil), line...)
	return m, false, nil
}

// RunTrainer runs one trainer round (docs/training.md "Trainer protocol"): it
// writes the batch and config into spec.WorkDir, runs the command in its
// own process group with the protocol flags, and on exit status 0 reads the
// metrics and hashes the files of spec.OutputDir. When ctx is done the
// whole process group is killed and the error wraps ctx.Err(). Errors wrap
// ErrTrainerFailed / ErrTrainerInput (exit status, with the output tail),
// ErrBadMetrics (naming the line), ErrNoCheckpoint, or a file error. The
// trainer "none" is the caller's: RunTrainer always runs a command.
func RunTrainer(ctx context.Context, spec TrainerSpec) (TrainResult, error) {
	if err := checkSpec(spec); err != nil {
		return TrainResult{}, err
	}
	if err := os.MkdirAll(spec.WorkDir, 0o755); err != nil {
		return TrainResult{}, fmt.Errorf("trainer work dir: %w", err)
	}
	batchPath := filepath.Join(spec.WorkDir, "batch.jsonl")
	if err := writeFileWith(batchPath, func(w io.Writer) error { return WriteBatch(w, spec.Samples) }); err != nil {
		return TrainResult{}, err
	}
	cfgPath := filepath.Join(spec.WorkDir, "config.json")
	cfgJSON, err := encodeTrainerConfig(spec.Config)
	if err != nil {
		return TrainResult{}, err
	}
	if err := os.WriteFile(cfgPath, cfgJSON, 0o644); err != nil {
		return TrainResult{}, fmt.Errorf("write trainer config: %w", err)
	}
	argv := spec.Command
	pythonPath := spec.PythonPath
	if len(argv) == 0 {
		argv = DefaultCommand()
		if pythonPath == "" {
			pythonPath = filepath.Join(spec.WorkDir, "python")
			if err := trainer.WriteTo(pythonPath); err != nil {
				return TrainResult{}, err
			}
		}
	}
	source := spec.Metrics
	if source == "" {
		source = MetricsFile
	}
	metricsPath := filepath.Join(spec.WorkDir, "metrics.jsonl")
	args := append(append([]string(nil), argv[1:]...),
		"--batch", batchPath, "--checkpoint", spec.Checkpoint, "--output", spec.OutputDir, "--config", cfgPath)
	if source == MetricsFile {
		// A stale file from an earlier attempt must not pass as this run's.
		if err := os.Remove(metricsPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return TrainResult{}, fmt.Errorf("remove stale metrics: %w", err)
		}
		args = append(args, "--metrics", metricsPath)
	}

	tailBytes := spec.TailBytes
	if tailBytes <= 0 {
		tailBytes = 16 << 10
	}
	tail := &tailBuffer{max: tailBytes}
	var stdoutLines *lineCollector
	cmd := exec.CommandContext(ctx, argv[0], args...)
	cmd.Env = trainerEnv(pythonPath, spec.Env)
	cmd.Stderr = tail
	if source == MetricsStdout {
		stdoutLines = &lineCollector{tail: tail}
		cmd.Stdout = stdoutLines
	} else {
		cmd.Stdout = tail
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// Kill the whole group: the trainer may have spawned workers
		// (torch.compile, data loaders) that would otherwise hold the GPU.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = spec.KillGrace
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 5 * time.Second
	}
	desc := strings.Join(argv, " ")
	runErr := cmd.Run()
	if ctx.Err() != nil {
		return TrainResult{}, fmt.Errorf("trainer %s: %w; output tail:\n%s", desc, ctx.Err(), tail.String())
	}
	if runErr != nil {
		var ee *exec.ExitError
		if errors.As(runErr, &ee) && ee.ExitCode() == 2 {
			return TrainResult{}, fmt.Errorf("%w: %s: %w; output tail:\n%s", ErrTrainerInput, desc, runErr, tail.String())
		}
		return TrainResult{}, fmt.Errorf("%w: %s: %w; output tail:\n%s", ErrTrainerFailed, desc, runErr, tail.String())
	}

	res := TrainResult{OutputTail: tail.String()}
	var lines [][]byte
	where := metricsPath
	if source == MetricsFile {
		b, err := os.ReadFile(metricsPath)
		if err != nil {
			return TrainResult{}, fmt.Errorf("%w: read %s: %w", ErrBadMetrics, metricsPath, err)
		}
		lines = bytes.Split(b, []byte("\n"))
	} else {
		where = "stdout"
		lines = stdoutLines.metrics()
	}
	for i, l := range lines {
		if len(bytes.TrimSpace(l)) == 0 {
			continue
		}
		m, isEvent, err := ParseMetricsLine(l)
		if err != nil {
			return TrainResult{}, fmt.Errorf("trainer metrics %s line %d: %w", where, i+1, err)
		}
		if isEvent {
			res.Events = append(res.Events, append(json.RawMessage(nil), bytes.TrimSpace(l)...))
			continue
		}
		res.Steps = append(res.Steps, m)
	}
	if len(res.Steps) == 0 {
		return TrainResult{}, fmt.Errorf("trainer metrics %s: %w: no step lines", where, ErrBadMetrics)
	}
	res.Files, err = HashCheckpoint(spec.OutputDir)
	if err != nil {
		return TrainResult{}, err
	}
	return res, nil
}

func checkSpec(spec TrainerSpec) error {
	switch {
	case spec.Checkpoint == "":
		return errors.New("trainer spec: Checkpoint is empty (want a directory or tiny:SEED)")
	case spec.OutputDir == "":
		return errors.New("trainer spec: OutputDir is empty")
	case spec.WorkDir == "":
		return errors.New("trainer spec: WorkDir is empty")
	case len(spec.Samples) == 0:
		return errors.New("trainer spec: no samples")
	case spec.Metrics != "" && spec.Metrics != MetricsFile && spec.Metrics != MetricsStdout:
		return fmt.Errorf("trainer spec: metrics source %q: want file or stdout", spec.Metrics)
	case spec.Config.InnerSteps < 1 || spec.Config.MicroBatchSize < 1 || spec.Config.MaxSeqLen < 1 || spec.Config.MaxTokensPerMicroBatch < 1:
		return fmt.Errorf("trainer spec: config inner_steps %d, micro_batch_size %d, max_tokens_per_micro_batch %d, max_seq_len %d must be >= 1 (build it with NewTrainerConfig)",
			spec.Config.InnerSteps, spec.Config.MicroBatchSize, spec.Config.MaxTokensPerMicroBatch, spec.Config.MaxSeqLen)
	}
	entries, err := os.ReadDir(spec.OutputDir)
	if err == nil && len(entries) > 0 {
		return fmt.Errorf("trainer output %s: directory is not empty", spec.OutputDir)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("trainer output: %w", err)
	}
	return nil
}

func trainerEnv(pythonPath string, extra []string) []string {
	// Nothing downloads at run time: transformers and huggingface_hub read
	// checkpoints from local directories only (spec.Env may override).
	env := append(os.Environ(), "HF_HUB_OFFLINE=1", "TRANSFORMERS_OFFLINE=1")
	if pythonPath != "" {
		pp := pythonPath
		if old := os.Getenv("PYTHONPATH"); old != "" {
			pp += string(os.PathListSeparator) + old
		}
		env = append(env, "PYTHONPATH="+pp)
	}
	// Later entries win in os/exec (duplicates are deduplicated keeping the
	// last), so Env overrides the inherited values.
	return append(env, extra...)
}

func writeFileWith(path string, fill func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := fill(f); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

// HashCheckpoint lists the regular files under dir (recursively, names
// relative and slash-separated, sorted) with sha256 and size in bytes. It
// returns ErrNoCheckpoint when config.json or any *.safetensors file is
// missing, and refuses symlinks (a checkpoint is committed by content).
func HashCheckpoint(dir string) ([]CheckpointFile, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s does not exist", ErrNoCheckpoint, dir)
	}
	var files []CheckpointFile
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if !d.Type().IsRegular() {
			return fmt.Errorf("checkpoint file %s: not a regular file", rel)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		n, err := io.Copy(h, f)
		if err != nil {
			return fmt.Errorf("hash %s: %w", p, err)
		}
		files = append(files, CheckpointFile{Name: filepath.ToSlash(rel), SHA256: hex.EncodeToString(h.Sum(nil)), Bytes: n})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read checkpoint %s: %w", dir, err)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	hasConfig, hasWeights := false, false
	for _, f := range files {
		hasConfig = hasConfig || f.Name == "config.json"
		hasWeights = hasWeights || strings.HasSuffix(f.Name, ".safetensors") && !strings.HasPrefix(f.Name, "optimizer")
	}
	if !hasConfig || !hasWeights {
		return nil, fmt.Errorf("%w: %s has config.json=%v, weights *.safetensors=%v", ErrNoCheckpoint, dir, hasConfig, hasWeights)
	}
	return files, nil
}

// tailBuffer keeps the last max bytes written; safe for the concurrent
// stdout/stderr copiers of os/exec.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

// lineCollector splits stdout into lines: lines starting with '{' are kept
// as metrics, the rest go to the tail.
type lineCollector struct {
	mu      sync.Mutex
	tail    *tailBuffer
	partial []byte
	lines   [][]byte
}

func (c *lineCollector) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.partial = append(c.partial, p...)
	for {
		i := bytes.IndexByte(c.partial, '\n')
		if i < 0 {
			break
		}
		c.take(c.partial[:i])
		c.partial = c.partial[i+1:]
	}
	return len(p), nil
}

func (c *lineCollector) take(l []byte) {
	if t := bytes.TrimSpace(l); len(t) > 0 && t[0] == '{' {
		c.lines = append(c.lines, append([]byte(nil), t...))
		return
	}
	_, _ = c.tail.Write(append(append([]byte(nil), l...), '\n'))
}

func (c *lineCollector) metrics() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.partial) > 0 {
		c.take(c.partial)
		c.partial = nil
	}
	return c.lines
}

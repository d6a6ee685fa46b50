// Package evaluate scores served checkpoints on held-out suites: the eval
// stage (stages/eval) (every eval.every rounds, checkpoint(r)) and `spade eval --round R`
// both serve a checkpoint with the agent role's serving settings
// (engine.ServeCheckpoint) and run trainer/spade_trainer/evaluate.py
// against it, which drives reasoning-gym and EleutherAI's
// lm-evaluation-harness (docs/recipes.md "Evaluation"). The harnesses do
// the scoring; this package only serves, runs and records.
package evaluate

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spade-pipeline/spade/engines/engine"
	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/openai"
	"github.com/spade-pipeline/spade/engines/model/serving"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/trainer"
)

// ServeAndScore serves checkpoint ck with the agent role's settings
// (engine.ServeCheckpoint), scores it with Score, and stops what it
// started, whatever the outcome. round fills the rows' round column.
// Under fixed serving of a trained ck it warns that the server's model
// is scored, not ck (the rows name "fixed:<model>"). Check runs first,
// before any server starts. When some requests
// failed it asks the server once more (GET /v1/models): one that no
// longer answers (it died part way) fails the evaluation with
// model.ErrUnavailable, nothing recorded.
func ServeAndScore(ctx context.Context, eng *engine.Engines, store storage.Store, ck schemas.Checkpoint, tag engine.ServeTag, round int) ([]schemas.Eval, error) {
	if err := Check(ctx, eng.Config.Eval, eng.Log); err != nil {
		return nil, fmt.Errorf("eval of round %d: %w", round, err)
	}
	ep, stop, err := eng.ServeCheckpoint(ctx, store, config.RoleAgent, ck, tag)
	if err != nil {
		return nil, fmt.Errorf("eval of round %d: %w", round, err)
	}
	defer stop()
	if !ep.Controlled && ck.Trainer != "base" {
		log := eng.Log
		if log == nil {
			log = slog.Default()
		}
		log.Warn("eval: model.serving is fixed, so the scores are of whatever the server serves, not of the round's checkpoint; use managed or reload serving to score it",
			"round", round, "checkpoint_id", ck.CheckpointID, "scored", ep.CheckpointID, "base_url", ep.Config.BaseURL)
	}
	rows, err := Score(ctx, eng.Config.Eval, eng.Log, ep, round)
	if err != nil {
		return nil, fmt.Errorf("eval of round %d (%s): %w", round, ep.CheckpointID, err)
	}
	if failed, _, _ := failures(rows); failed > 0 {
		// Some requests failed: scores of a server that went away part
		// way through are not an evaluation of the checkpoint. Keep them
		// only if the server still answers (failures of a flaky server
		// are scored rows, as elsewhere).
		b, err := openai.New(ep.Config)
		if err == nil {
			err = b.Preflight(ctx)
			b.Close()
		}
		if err != nil {
			if !errors.Is(err, model.ErrUnavailable) {
				err = fmt.Errorf("%w: %v", model.ErrUnavailable, err)
			}
			return nil, fmt.Errorf("eval of round %d (%s): %d requests failed and the server no longer answers, so nothing is recorded: %w", round, ep.CheckpointID, failed, err)
		}
	}
	return rows, nil
}

// failures reads the reasoning-gym errors rows: the requests that got no
// answer, the tasks, and the tasks none of whose requests got one.
func failures(rows []schemas.Eval) (requests int64, tasks, dead int) {
	for _, r := range rows {
		if r.Suite == "reasoning_gym" && r.Metric == "errors" {
			tasks++
			requests += int64(r.Value)
			if r.N > 0 && int64(r.Value) == r.N {
				dead++
			}
		}
	}
	return requests, tasks, dead
}

// Request is the evaluator's config (trainer/spade_trainer/evaluate.py's
// module doc): the endpoint, the sampling settings and the suites, from
// eval.* and the served endpoint.
type Request struct {
	BaseURL      string        `json:"base_url"`
	Model        string        `json:"model"`
	APIKeyEnv    string        `json:"api_key_env"`
	MaxTokens    int           `json:"max_tokens"`
	Temperature  float64       `json:"temperature"`
	Seed         int64         `json:"seed"`
	Concurrency  int           `json:"concurrency"`
	TimeoutS     float64       `json:"timeout_s"`
	ReasoningGym *reasoningGym `json:"reasoning_gym"`
	LMEval       *lmEval       `json:"lm_eval"`
}

type reasoningGym struct {
	Tasks        []string `json:"tasks"`
	Size         int      `json:"size"`
	Seed         int64    `json:"seed"`
	SystemPrompt string   `json:"system_prompt"`
}

type lmEval struct {
	IncludePath string   `json:"include_path"`
	Tasks       []string `json:"tasks"`
	Limit       *int     `json:"limit"`
}

// NewRequest builds the evaluator's config for endpoint ep from the
// eval.* settings e; a suite without tasks is left out (null). The
// lm_eval include path is made absolute. Error: no suite configured.
func NewRequest(e config.Eval, ep engine.Endpoint) (Request, error) {
	if !e.HasSuite() {
		return Request{}, fmt.Errorf("no evaluation suite configured: set eval.reasoning_gym.tasks or eval.lm_eval.tasks (docs/config.md)")
	}
	req := Request{
		BaseURL: ep.Config.BaseURL, Model: ep.Config.Model, APIKeyEnv: ep.Config.APIKeyEnv,
		MaxTokens: e.MaxTokens, Temperature: e.Temperature, Seed: e.Seed, Concurrency: e.Concurrency, TimeoutS: e.TimeoutS,
	}
	if rg := e.ReasoningGym; len(rg.Tasks) > 0 {
		req.ReasoningGym = &reasoningGym{Tasks: rg.Tasks, Size: rg.Size, Seed: rg.Seed, SystemPrompt: rg.SystemPrompt}
	}
	if le := e.LMEval; len(le.Tasks) > 0 {
		abs, err := filepath.Abs(le.IncludePath)
		if err != nil {
			return Request{}, fmt.Errorf("eval.lm_eval.include_path: %w", err)
		}
		l := &lmEval{IncludePath: abs, Tasks: le.Tasks}
		if le.Limit > 0 {
			l.Limit = &le.Limit
		}
		req.LMEval = l
	}
	return req, nil
}

// ErrEvaluator marks a failure of the evaluator process itself: a config
// it refuses (exit 2), a harness that raised, an output it did not write.
var ErrEvaluator = errors.New("evaluator failed")

// Score runs the evaluator (eval.python -m spade_trainer.evaluate, the
// embedded trainer package on PYTHONPATH) against endpoint ep and returns
// its rows with round and ep.CheckpointID filled, in the table's key
// order. The evaluator's own stderr lines are logged to log (nil:
// slog.Default()) as they come: failed requests at warn level, progress
// (items scored, a task's accuracy) at info level.
//
// Errors: no suite (NewRequest); eval.python missing or exiting non-zero,
// or a result line that is not a well-formed row (ErrEvaluator, with the
// evaluator's reason line, or the tail of its output when it gave none);
// and, when every request of every reasoning-gym
// task failed, an error wrapping model.ErrUnavailable: a server that is
// down scores nothing, and the stage commits nothing rather than a table
// of failures.
func Score(ctx context.Context, e config.Eval, log *slog.Logger, ep engine.Endpoint, round int) ([]schemas.Eval, error) {
	if log == nil {
		log = slog.Default()
	}
	var rows []schemas.Eval
	err := runEvaluator(ctx, e, log.With("round", round, "checkpoint_id", ep.CheckpointID), ep, func(dir string) []string {
		return []string{"--out", filepath.Join(dir, "rows.jsonl")}
	}, func(dir string) error {
		var err error
		rows, err = readRows(filepath.Join(dir, "rows.jsonl"), round, ep.CheckpointID)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := allFailed(rows); err != nil {
		return nil, err
	}
	return rows, nil
}

// Check runs the evaluator's --check on the eval.* settings e, calling no
// server: field values, reasoning-gym task and prompt names, the lm_eval
// task directory and its task names, task YAML that does not parse.
// ServeAndScore runs it before it starts a server, so a misspelt task
// fails in seconds. Errors: ErrEvaluator with the evaluator's reason, and
// NewRequest's.
func Check(ctx context.Context, e config.Eval, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	ep := engine.Endpoint{Config: openai.Config{BaseURL: "http://127.0.0.1:1/v1", Model: "check"}}
	return runEvaluator(ctx, e, log, ep, func(string) []string { return []string{"--check"} }, func(string) error { return nil })
}

// runEvaluator writes the trainer package and the evaluator's config for
// ep into a temporary directory, runs eval.python -m
// spade_trainer.evaluate --config C plus args(dir), logging its lines as
// they come (evaluatorLog), and calls done(dir) when it exits 0. A
// non-zero exit is ErrEvaluator with the evaluator's spade_eval_error
// reason line (or, without one, the tail of its output).
func runEvaluator(ctx context.Context, e config.Eval, log *slog.Logger, ep engine.Endpoint, args func(dir string) []string, done func(dir string) error) error {
	req, err := NewRequest(e, ep)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "spade-eval-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	pp := filepath.Join(dir, "python")
	if err := trainer.WriteTo(pp); err != nil {
		return err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(dir, "eval.json")
	if err := os.WriteFile(cfgPath, body, 0o600); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, e.Python, append([]string{"-m", "spade_trainer.evaluate", "--config", cfgPath}, args(dir)...)...)
	path := pp
	if old := os.Getenv("PYTHONPATH"); old != "" {
		path += string(os.PathListSeparator) + old
	}
	cmd.Env = append(os.Environ(), "PYTHONPATH="+path, "PYTHONUNBUFFERED=1")
	cmd.Dir = dir
	out := &evaluatorLog{log: log}
	cmd.Stderr = out
	cmd.Stdout = out // the same pointer: exec calls Write from one goroutine at a time
	if runErr := cmd.Run(); runErr != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if out.reason != "" {
			return fmt.Errorf("%w: %s", ErrEvaluator, out.reason)
		}
		return fmt.Errorf("%w: %s -m spade_trainer.evaluate: %v: %s", ErrEvaluator, e.Python, runErr, strings.TrimSpace(serving.TailText(out.String(), 8)))
	}
	return done(dir)
}

// readRows parses the evaluator's JSONL output; a bad line is an error
// naming the file's line and field.
func readRows(path string, round int, checkpointID string) ([]schemas.Eval, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: no result file: %v", ErrEvaluator, err)
	}
	defer f.Close()
	var rows []schemas.Eval
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	seen := map[[3]string]bool{}
	for line := 1; sc.Scan(); line++ {
		var r struct {
			Suite, Task, Metric string
			Value, Stderr       *float64
			N                   *int64
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%w: result line %d: %v", ErrEvaluator, line, err)
		}
		bad := ""
		switch {
		case r.Suite == "" || r.Task == "" || r.Metric == "":
			bad = "suite, task and metric must be non-empty"
		case r.Value == nil || math.IsNaN(*r.Value) || math.IsInf(*r.Value, 0):
			bad = "value must be a finite number"
		case r.Stderr == nil || !(*r.Stderr >= 0) || math.IsInf(*r.Stderr, 0):
			bad = "stderr must be a finite number >= 0"
		case r.N == nil || *r.N < 0:
			bad = "n must be a count >= 0"
		case seen[[3]string{r.Suite, r.Task, r.Metric}]:
			bad = fmt.Sprintf("(%s, %s, %s) given twice", r.Suite, r.Task, r.Metric)
		}
		if bad != "" {
			return nil, fmt.Errorf("%w: result line %d: %s", ErrEvaluator, line, bad)
		}
		seen[[3]string{r.Suite, r.Task, r.Metric}] = true
		rows = append(rows, schemas.Eval{Round: int64(round), CheckpointID: checkpointID, Suite: r.Suite, Task: r.Task, Metric: r.Metric, Value: *r.Value, N: *r.N, Stderr: *r.Stderr})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: read results: %v", ErrEvaluator, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: no result rows", ErrEvaluator)
	}
	slices.SortFunc(rows, func(a, b schemas.Eval) int { return schemas.Evals.Compare(&a, &b) })
	return rows, nil
}

// allFailed reports a server that answered nothing: every reasoning-gym
// task's errors equal to its item count.
func allFailed(rows []schemas.Eval) error {
	if _, tasks, dead := failures(rows); tasks > 0 && dead == tasks {
		return fmt.Errorf("%w: every evaluation request failed (%d reasoning-gym tasks); nothing is recorded", model.ErrUnavailable, tasks)
	}
	return nil
}

// evaluatorLog keeps the evaluator's output (for the error's tail) and
// logs its own lines as they come: "spade_eval: " lines (failed requests)
// as warnings, "spade_eval_progress: " lines (items scored so far, a
// task's accuracy) as info, so a long evaluation shows where it is; a
// "spade_eval_error: " line is kept as the reason of a failure.
type evaluatorLog struct {
	log     *slog.Logger
	all     bytes.Buffer
	partial []byte
	reason  string // the last spade_eval_error line: why the evaluator failed
}

func (w *evaluatorLog) Write(p []byte) (int, error) {
	w.all.Write(p)
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := string(w.partial[:i])
		w.partial = w.partial[i+1:]
		if rest, ok := strings.CutPrefix(line, "spade_eval: "); ok {
			w.log.Warn("eval", "evaluator", rest)
		} else if rest, ok := strings.CutPrefix(line, "spade_eval_error: "); ok {
			w.reason = rest
		} else if rest, ok := strings.CutPrefix(line, "spade_eval_progress: "); ok {
			w.log.Info("eval progress", "evaluator", rest)
		}
	}
	return len(p), nil
}

func (w *evaluatorLog) String() string { return w.all.String() }

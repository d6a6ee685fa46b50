package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/engines/model/modeltest"
	"github.com/spade-pipeline/spade/engines/report"
	"github.com/spade-pipeline/spade/internal/pyenv"
	"github.com/spade-pipeline/spade/pipeline/table"
	"github.com/spade-pipeline/spade/schemas"
)

// evalTinyTask is an lm-evaluation-harness task on disk: "What is a + b?"
// over a JSONL file, exact match after a first-number filter.
const evalTinyTask = `task: tiny_add
dataset_path: json
dataset_kwargs:
  data_files:
    test: %s
test_split: test
output_type: generate_until
doc_to_text: "What is {{a}} + {{b}}? Answer with the number only."
doc_to_target: "{{a + b}}"
generation_kwargs:
  until: ["\n\n"]
  max_gen_toks: 12
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
filter_list:
  - name: first_number
    filter:
      - function: regex
        regex_pattern: "(-?[0-9]+)"
      - function: take_first
`

var tinyAddRe = regexp.MustCompile(`^What is (-?\d+) \+ (-?\d+)\?`)

// evalGrader is a model server that answers the agent as modeltest's
// default handler does and evaluation questions by a known rule:
// reasoning-gym item i (by its question, answers from reasoning-gym
// itself) gets its right answer in answer tags when i%3 == 0, a wrong one
// in tags when i%3 == 1, and no tags when i%3 == 2; tiny_add item a+b is
// answered right when a is even.
//
// While down is set, every evaluation question gets a 500.
func evalGrader(answers map[string]int, truth []string, down *atomic.Bool) modeltest.Handler {
	base := modeltest.DefaultHandler(modeltest.DefaultEnvSource, modeltest.DefaultHint)
	return func(req modeltest.Request) modeltest.Reply {
		msgs := req.Chat.Messages
		q := msgs[len(msgs)-1].Content
		reply := func(text string) modeltest.Reply {
			return modeltest.Reply{Choices: []model.Choice{{Message: model.Message{Role: "assistant", Content: text}, FinishReason: "stop"}}}
		}
		if _, ok := answers[q]; ok && down.Load() {
			return modeltest.Reply{Fault: modeltest.Fault{Kind: modeltest.FaultServerError, Message: "engine dead"}}
		}
		if i, ok := answers[q]; ok {
			switch i % 3 {
			case 0:
				return reply("<answer>" + truth[i] + "</answer>")
			case 1:
				return reply("<answer>no idea</answer>")
			default:
				return reply("I think it is " + truth[i])
			}
		}
		if m := tinyAddRe.FindStringSubmatch(q); m != nil {
			a, _ := strconv.Atoi(m[1])
			b, _ := strconv.Atoi(m[2])
			if a%2 == 0 {
				return reply(strconv.Itoa(a + b))
			}
			return reply(strconv.Itoa(a + b + 1))
		}
		return base(req)
	}
}

// TestEvalStage is issue 26's evaluation, end to end with the real
// harnesses: round 1 with eval.every 1 serves its checkpoint (here a
// fixed server, a fake that speaks the OpenAI wire format and grades by a
// known rule) to spade_trainer.evaluate, which generates reasoning-gym
// items and scores them with reasoning-gym, and runs an
// lm-evaluation-harness task from a directory on disk. The evals table
// of the sealed round holds exactly the scores the rule implies; spade
// eval --round 1 writes the same scores beside the rounds and a second
// call does nothing; the report plots them; and a server that fails every
// evaluation request fails the stage (nothing committed) until it is back.
func TestEvalStage(t *testing.T) {
	py := pyenv.Require(t, "reasoning_gym", "lm_eval", "openai")
	const size, seed = 30, 7
	out, err := exec.Command(py, "-c", fmt.Sprintf(`import json, reasoning_gym
ds = reasoning_gym.create_dataset("basic_arithmetic", size=%d, seed=%d)
print(json.dumps([[e["question"], e["answer"]] for e in ds]))`, size, seed)).Output()
	require.NoError(t, err)
	var items [][2]string
	require.NoError(t, json.Unmarshal(out, &items))
	require.Len(t, items, size)
	answers, truth := map[string]int{}, make([]string, size)
	for i, it := range items {
		answers[it[0]], truth[i] = i, it[1]
	}
	var down atomic.Bool
	srv := modeltest.Start(t, modeltest.WithModel("grader"), modeltest.WithHandler(evalGrader(answers, truth, &down)))

	dir := t.TempDir()
	data := filepath.Join(dir, "tiny_add.jsonl")
	var lines []string
	for a := 0; a < 6; a++ {
		lines = append(lines, fmt.Sprintf(`{"a": %d, "b": %d}`, a, 10-a))
	}
	require.NoError(t, os.WriteFile(data, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	tasks := filepath.Join(dir, "tasks")
	require.NoError(t, os.MkdirAll(tasks, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(tasks, "tiny_add.yaml"), []byte(fmt.Sprintf(evalTinyTask, data)), 0o644))

	cfg := writeConfig(t, dir, fmt.Sprintf(`sample: {slots: 2}
rollout: {group_size: 1, max_turns: 2}
model:
  backend: openai
  serving: fixed
  base_url: %s
  name: grader
  roles:
    designer: {backend: procedural}
    hint: {backend: procedural}
eval:
  every: 1
  max_tokens: 64
  seed: 3
  concurrency: 4
  reasoning_gym: {tasks: [basic_arithmetic], size: %d, seed: %d, system_prompt: direct}
  lm_eval: {include_path: %s, tasks: [tiny_add]}
`, srv.URL, size, seed, tasks))

	// Every evaluation request fails: the stage fails, the round is not sealed.
	down.Store(true)
	r := spade(t, dir, nil, "--config", cfg, "round", "1")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "every evaluation request failed")
	st := spade(t, dir, nil, "--config", cfg, "status", "--json")
	require.Equal(t, 0, st.code, st.stderr)
	require.NotContains(t, st.stdout, `"evals"`)
	require.Contains(t, st.stdout, `"metrics"`, "the stages before eval committed")
	down.Store(false)
	before := len(srv.Requests())

	r = spade(t, dir, nil, "--config", cfg, "round", "1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, "basic_arithmetic: 3 of 30 items", "progress logged while the task runs")
	var right, tagged int
	for i := range size {
		if i%3 == 0 {
			right++
		}
		if i%3 != 2 {
			tagged++
		}
	}
	got := sqlCSV(t, dir, cfg, "SELECT round, checkpoint_id, suite, task, metric, value, n FROM evals ORDER BY suite, task, metric")
	want := strings.Join([]string{
		"1,fixed:grader,lm_eval,tiny_add,\"exact_match,first_number\",0.5,6",
		fmt.Sprintf("1,fixed:grader,reasoning_gym,basic_arithmetic,accuracy,%s,%d", strconv.FormatFloat(float64(right)/size, 'g', -1, 64), size),
		fmt.Sprintf("1,fixed:grader,reasoning_gym,basic_arithmetic,errors,0,%d", size),
		fmt.Sprintf("1,fixed:grader,reasoning_gym,basic_arithmetic,format_rate,%s,%d", strconv.FormatFloat(float64(tagged)/size, 'g', -1, 64), size),
	}, "\n")
	require.Equal(t, want, got)
	reqs := 0
	for _, q := range srv.Requests()[before:] {
		msgs := q.Chat.Messages
		if _, ok := answers[msgs[len(msgs)-1].Content]; ok {
			reqs++
			require.Equal(t, "grader", q.Model)
			require.Equal(t, 64, q.Chat.MaxTokens)
			require.Equal(t, 0.0, q.Chat.Temperature)
		}
	}
	require.Equal(t, size, reqs, "one request per reasoning-gym item")

	// spade eval on the sealed round: the same scores, kept beside the rounds.
	r = spade(t, dir, nil, "--config", cfg, "eval", "--round", "1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "4 scores written to default/evals/round=000001/evals-")
	side, err := filepath.Glob(filepath.Join(dir, "runs", "default", "evals", "round=000001", "evals-*.parquet"))
	require.NoError(t, err)
	require.Len(t, side, 1)
	raw, err := os.ReadFile(side[0])
	require.NoError(t, err)
	sideRows, _, err := table.Decode(schemas.Evals, side[0], raw)
	require.NoError(t, err)
	var got2 []string
	for _, e := range sideRows {
		got2 = append(got2, fmt.Sprintf("%d,%s,%s,%s,%s,%s,%d", e.Round, e.CheckpointID, e.Suite, e.Task, strconv.Quote(e.Metric), strconv.FormatFloat(e.Value, 'g', -1, 64), e.N))
	}
	require.Equal(t, strings.ReplaceAll(strings.ReplaceAll(want, ",accuracy,", ",\"accuracy\","), ",errors,", ",\"errors\","), strings.ReplaceAll(strings.Join(got2, "\n"), ",\"format_rate\",", ",format_rate,"))
	r = spade(t, dir, nil, "--config", cfg, "eval", "--round", "1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "already evaluated")
	r = spade(t, dir, nil, "--config", cfg, "eval", "--round", "1", "--force")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "4 scores written to default/evals/round=000001/evals-")
	r = spade(t, dir, nil, "--config", cfg, "eval", "--round", "0")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "4 scores written to default/evals/round=000000/evals-")
	// A second evaluated round: the evals view spans both (the table's
	// own round column stands under the view's), and every other view
	// still works.
	r = spade(t, dir, nil, "--config", cfg, "round", "2")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "1,4\n2,4", sqlCSV(t, dir, cfg, "SELECT round, count(*) FROM evals GROUP BY round ORDER BY round"))
	require.Equal(t, "2", sqlCSV(t, dir, cfg, "SELECT count(DISTINCT round) FROM metrics"))
	r = spade(t, dir, nil, "--config", cfg, "eval", "--round", "3")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "round 3 has no checkpoints table yet")

	// A task the directory does not hold fails before any request, naming
	// the setting; a procedural agent is a usage error.
	before = len(srv.Requests())
	bad := writeConfig(t, t.TempDir(), strings.Replace(mustRead(t, cfg), "tasks: [tiny_add]", "tasks: [tiny_sub]", 1))
	r = spade(t, dir, nil, "--config", bad, "eval", "--round", "1")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "eval.lm_eval.tasks ['tiny_sub'] are not tasks of")
	require.Equal(t, before, len(srv.Requests()), "no request before the config is checked")
	// The same mistake in a round that would run the eval stage: refused
	// before any stage, and no run pinned with it.
	r = spade(t, dir, nil, "--config", bad, "--run", "misspelt", "round", "1")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "eval.lm_eval.tasks ['tiny_sub'] are not tasks of")
	require.NoDirExists(t, filepath.Join(dir, "runs", "misspelt"))
	require.Equal(t, before, len(srv.Requests()))
	proc := writeConfig(t, t.TempDir(), "eval: {reasoning_gym: {tasks: [basic_arithmetic]}}\n")
	r = spade(t, dir, nil, "--config", proc, "eval", "--round", "1")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "the agent role's backend is procedural")

	html := filepath.Join(dir, "report.html")
	r = spade(t, dir, nil, "--config", cfg, "report", "--out", html)
	require.Equal(t, 0, r.code, r.stderr)
	page := mustRead(t, html)
	require.Contains(t, page, report.TitleEvals)
	require.Contains(t, page, "reasoning_gym/basic_arithmetic accuracy")
	require.Contains(t, page, "lm_eval/tiny_add exact_match,first_number")
	require.Equal(t, report.PlotCount+1, strings.Count(page, "<svg "))
	require.Contains(t, page, "<td>0 (base)</td>", "the base checkpoint's scores head the table")
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

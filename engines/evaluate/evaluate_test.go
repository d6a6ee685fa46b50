package evaluate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spade-pipeline/spade/engines/model"
	"github.com/spade-pipeline/spade/pipeline/config"
	"github.com/spade-pipeline/spade/pipeline/storage"
	"github.com/spade-pipeline/spade/pipeline/storage/memstore"
	"github.com/spade-pipeline/spade/schemas"
	"github.com/spade-pipeline/spade/trainer"
)

// TestReadRows: the evaluator's JSONL is parsed strictly, a bad line named
// by its number and what is wrong with it; good rows come back in the
// table's key order with round and checkpoint filled.
func TestReadRows(t *testing.T) {
	dir := t.TempDir()
	write := func(text string) string {
		p := filepath.Join(dir, "rows.jsonl")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := `{"suite": "reasoning_gym", "task": "b", "metric": "accuracy", "value": 0.5, "n": 4, "stderr": 0.25}
{"suite": "lm_eval", "task": "aime", "metric": "exact_match,none", "value": 0.1, "n": 30, "stderr": 0.05}
`
	rows, err := readRows(write(good), 3, "abc")
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Suite != "lm_eval" || rows[1].Task != "b" || rows[0].Round != 3 || rows[1].CheckpointID != "abc" || rows[1].Stderr != 0.25 || rows[0].N != 30 {
		t.Errorf("rows = %+v", rows)
	}
	for name, c := range map[string]struct{ text, want string }{
		"not json":     {"{\n", "result line 1:"},
		"no metric":    {`{"suite": "s", "task": "t", "value": 1, "n": 1, "stderr": 0}`, "result line 1: suite, task and metric must be non-empty"},
		"no value":     {`{"suite": "s", "task": "t", "metric": "m", "n": 1, "stderr": 0}`, "result line 1: value must be a finite number"},
		"neg stderr":   {`{"suite": "s", "task": "t", "metric": "m", "value": 1, "n": 1, "stderr": -1}`, "result line 1: stderr must be a finite number >= 0"},
		"no n":         {`{"suite": "s", "task": "t", "metric": "m", "value": 1, "stderr": 0}`, "result line 1: n must be a count >= 0"},
		"twice":        {good + `{"suite": "lm_eval", "task": "aime", "metric": "exact_match,none", "value": 0.2, "n": 30, "stderr": 0}`, "result line 3: (lm_eval, aime, exact_match,none) given twice"},
		"empty output": {"", "no result rows"},
	} {
		_, err := readRows(write(c.text), 1, "x")
		if !errors.Is(err, ErrEvaluator) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrEvaluator with %q", name, err, c.want)
		}
	}
	if _, err := readRows(filepath.Join(dir, "missing"), 1, "x"); !errors.Is(err, ErrEvaluator) {
		t.Errorf("no file: err = %v", err)
	}
}

// TestAllFailed: only a server that answered no reasoning-gym request at
// all is unavailable; some failures are scored rows.
func TestAllFailed(t *testing.T) {
	errs := func(v ...float64) []schemas.Eval {
		var rows []schemas.Eval
		for i, x := range v {
			rows = append(rows, schemas.Eval{Suite: "reasoning_gym", Task: string(rune('a' + i)), Metric: "errors", Value: x, N: 10})
		}
		return rows
	}
	if err := allFailed(errs(10, 10)); !errors.Is(err, model.ErrUnavailable) {
		t.Errorf("all failed: err = %v", err)
	}
	for _, rows := range [][]schemas.Eval{errs(10, 9), errs(0), nil, {{Suite: "lm_eval", Task: "t", Metric: "errors", Value: 5, N: 5}}} {
		if err := allFailed(rows); err != nil {
			t.Errorf("%+v: err = %v", rows, err)
		}
	}
}

// TestScores: the report plots reasoning-gym accuracy and lm_eval metrics
// in [0, 1]; counts and unbounded metrics stay in the table.
func TestScores(t *testing.T) {
	got := Scores([]schemas.Eval{
		{Suite: "reasoning_gym", Task: "b", Metric: "accuracy", Value: 0.5},
		{Suite: "reasoning_gym", Task: "b", Metric: "format_rate", Value: 0.9},
		{Suite: "reasoning_gym", Task: "b", Metric: "errors", Value: 1},
		{Suite: "lm_eval", Task: "aime", Metric: "exact_match,none", Value: 0.25},
		{Suite: "lm_eval", Task: "wiki", Metric: "word_perplexity,none", Value: 31.5},
	})
	if len(got) != 2 || got["reasoning_gym/b accuracy"] != 0.5 || got["lm_eval/aime exact_match,none"] != 0.25 {
		t.Errorf("Scores = %v", got)
	}
	if Scores(nil) != nil {
		t.Error("no rows should give nil")
	}
}

// TestSideFiles: side evaluations round-trip through the store by round;
// of two evaluations of one score the one over more items wins, whatever
// their digests' order; the digest ignores operational settings and
// eval.every but not the suites or the checkpoint; files that are not
// side files are ignored and a damaged one is an error naming its key.
func TestSideFiles(t *testing.T) {
	ctx := context.Background()
	st, err := storage.Open(ctx, "mem://"+t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { memstore.Forget(t.Name()) })
	def := config.Default()
	cfg := &def
	cfg.Eval.ReasoningGym.Tasks = []string{"basic_arithmetic"}
	digest := func(c *config.Config, ck string) string {
		t.Helper()
		d, err := SideDigest(c, ck)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := digest(cfg, "ck1")
	other := *cfg
	other.Eval.Concurrency, other.Eval.TimeoutS, other.Eval.Python, other.Eval.Every = 99, 1, "/x/python", 7
	if digest(&other, "ck1") != d {
		t.Error("operational eval settings or eval.every change the digest")
	}
	more := *cfg
	more.Eval.ReasoningGym.Size = 300
	if digest(&more, "ck1") == d || digest(cfg, "ck2") == d {
		t.Error("the suite's size or the checkpoint does not change the digest")
	}
	// lm_eval: the task files are part of what is scored.
	tasks := t.TempDir()
	if err := os.WriteFile(filepath.Join(tasks, "t.yaml"), []byte("task: t\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	le := *cfg
	le.Eval.LMEval.IncludePath, le.Eval.LMEval.Tasks = tasks, []string{"t"}
	d1 := digest(&le, "ck1")
	if err := os.WriteFile(filepath.Join(tasks, "t.yaml"), []byte("task: t\nlimit: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if digest(&le, "ck1") == d1 {
		t.Error("an edited task file does not change the digest")
	}
	d2 := digest(&le, "ck1")
	t.Chdir(filepath.Dir(tasks))
	rel := le
	rel.Eval.LMEval.IncludePath = filepath.Base(tasks)
	if digest(&rel, "ck1") != d2 {
		t.Error("a relative include_path naming the same directory changes the digest")
	}
	le.Eval.LMEval.IncludePath = filepath.Join(tasks, "missing")
	if _, err := SideDigest(&le, "ck1"); err == nil || !strings.Contains(err.Error(), "eval.lm_eval.include_path") {
		t.Errorf("missing task directory: err = %v", err)
	}
	row := func(n int64, v float64) []schemas.Eval {
		return []schemas.Eval{{Round: 1, CheckpointID: "ck1", Suite: "reasoning_gym", Task: "basic_arithmetic", Metric: "accuracy", Value: v, N: n}}
	}
	// Two digests in both orders: the larger n wins either way.
	for _, pair := range [][2]string{{"0000000000000000", "ffffffffffffffff"}, {"ffffffffffffffff", "0000000000000000"}} {
		prefix := SidePrefix("run")
		infos, _ := st.List(ctx, prefix)
		for _, in := range infos {
			_ = st.Delete(ctx, in.Key)
		}
		if _, err := WriteSide(ctx, st, "run", 1, pair[0], row(300, 0.3), ""); err != nil {
			t.Fatal(err)
		}
		if _, err := WriteSide(ctx, st, "run", 1, pair[1], row(100, 0.1), ""); err != nil {
			t.Fatal(err)
		}
		side, damaged, err := ReadSide(ctx, st, "run")
		if len(damaged) > 0 {
			t.Fatal(damaged)
		}
		if err != nil {
			t.Fatal(err)
		}
		rows, err := RoundEvals(ctx, st, "run", 1, side)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].N != 300 || rows[0].Value != 0.3 {
			t.Errorf("digests %v: rows = %+v, want the 300-item evaluation", pair, rows)
		}
	}
	if err := st.Put(ctx, "run/evals/round=000001/notes.txt", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	if _, damaged, err := ReadSide(ctx, st, "run"); err != nil || len(damaged) > 0 {
		t.Errorf("a file that is not a side file: %v %v", err, damaged)
	}
	bad := SideKey("run", 2, "0123456789abcdef")
	if err := st.Put(ctx, bad, strings.NewReader("not parquet"), 11); err != nil {
		t.Fatal(err)
	}
	side, damaged, err := ReadSide(ctx, st, "run")
	if err != nil || len(damaged) != 1 || !strings.Contains(damaged[0].Error(), bad) || !strings.Contains(damaged[0].Error(), "spade eval --round 2 --force") {
		t.Errorf("damaged side file: err = %v, damaged = %v, want one naming %s and the fix", err, damaged, bad)
	}
	if len(side[1]) != 2 || len(side[2]) != 0 {
		t.Errorf("the good files are still read and the damaged one left out: %v", side)
	}
}

// TestEvaluatorLog: the evaluator's own lines are logged as they come,
// even split across writes; everything is kept for an error's tail.
func TestEvaluatorLog(t *testing.T) {
	var logged bytes.Buffer
	w := &evaluatorLog{log: slog.New(slog.NewTextHandler(&logged, nil))}
	for _, chunk := range []string{"harness noise\nspade_eval_pro", "gress: b: 3 of 30 items\n", "spade_eval: b: 2 of 30 requests failed\npartial"} {
		if _, err := w.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	out := logged.String()
	if !strings.Contains(out, `level=INFO msg="eval progress" evaluator="b: 3 of 30 items"`) || !strings.Contains(out, `level=WARN msg=eval evaluator="b: 2 of 30 requests failed"`) || strings.Contains(out, "noise") {
		t.Errorf("logged:\n%s", out)
	}
	if !strings.HasSuffix(w.String(), "partial") || !strings.HasPrefix(w.String(), "harness noise") {
		t.Errorf("kept %q", w.String())
	}
}

// TestSettingsCoverTheEvaluator: the eval stage's config subset (and so
// the side files' digest) carries the evaluator's code digest, which is
// not the trainer's: editing evaluate.py is another evaluation and does
// not re-run grpo.
func TestSettingsCoverTheEvaluator(t *testing.T) {
	c := config.Default()
	b, err := json.Marshal(Settings(c.Eval, c.Model))
	require.NoError(t, err)
	require.Contains(t, string(b), `"Evaluator":"`+trainer.EvaluatorDigest()+`"`)
	require.NotEqual(t, trainer.Digest(), trainer.EvaluatorDigest())
	require.Len(t, trainer.EvaluatorDigest(), 64)
}

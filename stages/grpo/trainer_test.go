package grpo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/spade-pipeline/spade/internal/pyenv"
	"github.com/spade-pipeline/spade/trainer"
)

func testSamples() []Sample {
	return []Sample{
		{SampleID: "a1", Role: "agent", Group: "env1", Reward: 1, Advantage: 1, Weight: 1,
			Messages: []Message{{Role: "user", Content: "obs: door"}, {Role: "assistant", Content: "open"}, {Role: "user", Content: "obs: key"}, {Role: "assistant", Content: "take key"}}},
		{SampleID: "a2", Role: "agent", Group: "env1", Reward: 0, Advantage: -1, Weight: 1,
			Messages: []Message{{Role: "user", Content: "obs: door"}, {Role: "assistant", Content: "wait"}}},
		{SampleID: "d1", Role: "designer", Group: "logic", Reward: 0.5, Advantage: 0.25, Weight: 4,
			Messages: []Message{{Role: "system", Content: "You design environments."}, {Role: "user", Content: "Design one."}, {Role: "assistant", Content: "class Env: pass"}}},
	}
}

// python3HasTorch requires the pinned virtual environment (DefaultPython)
// with torch and transformers: it fails under CI and skips elsewhere when
// `make venv` has not run (internal/pyenv).
func python3HasTorch(t *testing.T) {
	t.Helper()
	if py := pyenv.Require(t, "torch", "transformers"); py != DefaultPython {
		t.Skipf("skipping: the virtual environment is %s (SPADE_VENV), the trainer's default interpreter is %s", py, DefaultPython)
	}
}

// tinyTokenCounts is the number of tokens of each text under the tiny
// model's tokenizer (spade_trainer.tokenizer.tiny_tokenizer), asked of the
// embedded trainer package in the virtual environment.
func tinyTokenCounts(t *testing.T, texts ...string) []int {
	t.Helper()
	dir := t.TempDir()
	if err := trainer.WriteTo(dir); err != nil {
		t.Fatal(err)
	}
	arg, err := json.Marshal(texts)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(DefaultPython, "-c", "import json, sys\nfrom spade_trainer.tokenizer import tiny_tokenizer\n"+
		"tok = tiny_tokenizer()\nprint(json.dumps([len(tok(x, add_special_tokens=False)['input_ids']) for x in json.loads(sys.argv[1])]))", string(arg))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("count tiny tokens: %v", err)
	}
	var counts []int
	if err := json.Unmarshal(out, &counts); err != nil || len(counts) != len(texts) {
		t.Fatalf("count tiny tokens: %q: %v", out, err)
	}
	return counts
}

func TestRunTrainerEndToEnd(t *testing.T) {
	python3HasTorch(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cfg := DefaultTrainerConfig()
	cfg.LR = 1e-3
	cfg.InnerSteps = 2
	cfg.MicroBatchSize = 2
	cfg.Device = "cpu"
	spec := TrainerSpec{
		Checkpoint: "tiny:7",
		OutputDir:  filepath.Join(dir, "ckpt1"),
		WorkDir:    filepath.Join(dir, "work1"),
		Samples:    testSamples(),
		Config:     cfg,
	}
	res, err := RunTrainer(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Steps) != 2 || res.Steps[0].Step != 1 || res.Steps[1].Step != 2 {
		t.Fatalf("steps = %+v", res.Steps)
	}
	// First inner step: ratio is exactly 1, so loss = -(1/T) sum w*A*n with
	// n the trained tokens (content tokens + <|im_end|>) of each sample.
	c := tinyTokenCounts(t, "open", "take key", "wait", "class Env: pass")
	n := []float64{float64(c[0] + 1 + c[1] + 1), float64(c[2] + 1), float64(c[3] + 1)}
	T := n[0] + n[1] + n[2]
	want := -(1*1*n[0] + 1*-1*n[1] + 4*0.25*n[2]) / T
	if math.Abs(res.Steps[0].Loss-want) > 1e-6 {
		t.Errorf("step 1 loss = %v, want %v", res.Steps[0].Loss, want)
	}
	if res.Steps[0].TrainedTokens != int64(T) || res.Steps[0].GradNorm <= 0 || res.Steps[0].Tokens <= int64(T) || res.Steps[0].MicroBatches != 2 {
		t.Errorf("step 1 metrics = %+v", res.Steps[0])
	}
	// The trainer reports how it encoded the batch, then that it is done.
	if len(res.Events) != 2 || !bytes.Contains(res.Events[0], []byte(`"event":"encode"`)) || !bytes.Contains(res.Events[0], []byte(`"kept":3`)) ||
		!bytes.Contains(res.Events[1], []byte(`"done"`)) {
		t.Errorf("events = %s", res.Events)
	}
	names := map[string]CheckpointFile{}
	for _, f := range res.Files {
		names[f.Name] = f
	}
	for _, want := range []string{"config.json", "model.safetensors", "tokenizer.json", "spade_checkpoint.json", "optimizer/.metadata"} {
		f, ok := names[want]
		if !ok {
			t.Fatalf("checkpoint lacks %s: %+v", want, res.Files)
		}
		b, err := os.ReadFile(filepath.Join(spec.OutputDir, want))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if f.SHA256 != hex.EncodeToString(sum[:]) || f.Bytes != int64(len(b)) {
			t.Errorf("%s: hash/bytes mismatch", want)
		}
	}
	var cfgJSON map[string]any
	b, _ := os.ReadFile(filepath.Join(spec.OutputDir, "config.json"))
	if err := json.Unmarshal(b, &cfgJSON); err != nil || cfgJSON["model_type"] != "qwen3" {
		t.Errorf("config.json model_type = %v (%v)", cfgJSON["model_type"], err)
	}

	// Second round from the new checkpoint, metrics read from stdout.
	spec2 := spec
	spec2.Checkpoint = spec.OutputDir
	spec2.OutputDir = filepath.Join(dir, "ckpt2")
	spec2.WorkDir = filepath.Join(dir, "work2")
	spec2.Metrics = MetricsStdout
	res2, err := RunTrainer(ctx, spec2)
	if err != nil {
		t.Fatal(err)
	}
	if len(res2.Steps) != 2 {
		t.Fatalf("round 2 steps = %+v", res2.Steps)
	}
	var meta struct {
		Step   int    `json:"step"`
		Parent string `json:"parent"`
	}
	b, _ = os.ReadFile(filepath.Join(spec2.OutputDir, "spade_checkpoint.json"))
	if err := json.Unmarshal(b, &meta); err != nil || meta.Step != 2 || meta.Parent != spec.OutputDir {
		t.Errorf("round 2 lineage = %+v (%v)", meta, err)
	}

	// Same inputs and seed: byte-identical weights.
	spec3 := spec
	spec3.OutputDir = filepath.Join(dir, "ckpt3")
	spec3.WorkDir = filepath.Join(dir, "work3")
	res3, err := RunTrainer(ctx, spec3)
	if err != nil {
		t.Fatal(err)
	}
	if sha(res.Files, "model.safetensors") != sha(res3.Files, "model.safetensors") {
		t.Error("same inputs gave different weights")
	}
}

func sha(files []CheckpointFile, name string) string {
	for _, f := range files {
		if f.Name == name {
			return f.SHA256
		}
	}
	return ""
}

func TestRunTrainerRealInputError(t *testing.T) {
	python3HasTorch(t)
	dir := t.TempDir()
	cfg := DefaultTrainerConfig()
	cfg.MaxSeqLen = 8 // every sample is longer: with "error" the trainer exits 2
	cfg.Overlong = "error"
	_, err := RunTrainer(context.Background(), TrainerSpec{
		Checkpoint: "tiny:1", OutputDir: filepath.Join(dir, "out"), WorkDir: dir, Samples: testSamples(), Config: cfg,
	})
	if !errors.Is(err, ErrTrainerInput) || !strings.Contains(err.Error(), "exceeds max_seq_len") {
		t.Fatalf("err = %v, want ErrTrainerInput naming max_seq_len", err)
	}
}

// shellTrainer returns a trainer command running script under /bin/sh.
// The protocol flags arrive as $1..$10: --batch B --checkpoint C --output O
// --config F [--metrics M].
func shellTrainer(script string) []string { return []string{"/bin/sh", "-c", script, "trainer"} }

const writeCkpt = `mkdir -p "$6" && echo '{"model_type":"qwen3"}' > "$6/config.json" && printf 'w' > "$6/model.safetensors"; `

func TestRunTrainerProtocol(t *testing.T) {
	tests := []struct {
		name    string
		script  string
		metrics MetricsSource
		err     error
		errText string
		steps   int
	}{
		{name: "success via file", script: writeCkpt + `echo '{"step":1,"loss":0.5}' > "${10}"; echo '{"event":"done"}' >> "${10}"`, steps: 1},
		{name: "success via stdout with logs", metrics: MetricsStdout,
			script: writeCkpt + `echo loading; echo '{"step":1,"loss":0.5,"kl":0}'; echo '{"step":2,"loss":0.4,"extra":"x"}'; echo bye`, steps: 2},
		{name: "exit 1 keeps stderr tail", script: `echo 'CUDA out of memory' >&2; exit 1`, err: ErrTrainerFailed, errText: "CUDA out of memory"},
		{name: "exit 2 is input error", script: `echo 'batch.jsonl:3: field role' >&2; exit 2`, err: ErrTrainerInput, errText: "field role"},
		{name: "bad metrics line named", script: writeCkpt + `echo '{"step":1}' > "${10}"; echo 'oops' >> "${10}"`, err: ErrBadMetrics, errText: "line 2"},
		{name: "wrong metric type", script: writeCkpt + `echo '{"step":"one"}' > "${10}"`, err: ErrBadMetrics, errText: "line 1"},
		{name: "no step metrics", script: writeCkpt + `echo '{"event":"done"}' > "${10}"`, err: ErrBadMetrics, errText: "no step lines"},
		{name: "no checkpoint", script: `echo '{"step":1}' > "${10}"`, err: ErrNoCheckpoint},
		{name: "no weights", script: `mkdir -p "$6" && echo '{}' > "$6/config.json"; echo '{"step":1}' > "${10}"`, err: ErrNoCheckpoint},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			res, err := RunTrainer(context.Background(), TrainerSpec{
				Command: shellTrainer(tc.script), Checkpoint: "tiny:0", OutputDir: filepath.Join(dir, "out"),
				WorkDir: filepath.Join(dir, "work"), Samples: testSamples(), Config: DefaultTrainerConfig(), Metrics: tc.metrics,
			})
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.errText) {
					t.Fatalf("err = %v, want %v containing %q", err, tc.err, tc.errText)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Steps) != tc.steps {
				t.Fatalf("steps = %d, want %d", len(res.Steps), tc.steps)
			}
			if tc.metrics == MetricsStdout && (!strings.Contains(res.OutputTail, "loading") || strings.Contains(res.OutputTail, `"step"`)) {
				t.Errorf("stdout logs/metrics split wrong; tail %q", res.OutputTail)
			}
			if len(res.Files) != 2 || res.Files[0].Name != "config.json" || res.Files[1].Name != "model.safetensors" || res.Files[1].Bytes != 1 {
				t.Errorf("files = %+v", res.Files)
			}
		})
	}
}

func TestRunTrainerWritesProtocolFiles(t *testing.T) {
	dir := t.TempDir()
	// The command copies what it was given so the test can inspect argv,
	// the batch and the config exactly as the trainer sees them.
	script := writeCkpt + `printf '%s\n' "$@" > "$6/../argv"; cp "$2" "$6/../seen_batch"; cp "$8" "$6/../seen_config"; echo '{"step":1}' > "${10}"`
	cfg := DefaultTrainerConfig()
	cfg.KLBeta = 0.05
	_, err := RunTrainer(context.Background(), TrainerSpec{
		Command: shellTrainer(script), Checkpoint: "/ckpts/r3", OutputDir: filepath.Join(dir, "out"),
		WorkDir: filepath.Join(dir, "work"), Samples: testSamples(), Config: cfg,
	})
	if err != nil {
		t.Fatal(err)
	}
	argv, _ := os.ReadFile(filepath.Join(dir, "argv"))
	if !strings.Contains(string(argv), "--checkpoint\n/ckpts/r3\n--output\n"+filepath.Join(dir, "out")) {
		t.Errorf("argv = %q", argv)
	}
	lines := strings.Split(strings.TrimSpace(readString(t, filepath.Join(dir, "seen_batch"))), "\n")
	if len(lines) != 3 {
		t.Fatalf("batch lines = %d", len(lines))
	}
	var s Sample
	if err := json.Unmarshal([]byte(lines[2]), &s); err != nil || s.SampleID != "d1" || s.Weight != 4 || s.Messages[2].Content != "class Env: pass" {
		t.Errorf("batch line 3 = %q (%v)", lines[2], err)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(readString(t, filepath.Join(dir, "seen_config"))), &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"lr", "clip_epsilon", "kl_beta", "grad_clip", "inner_steps", "seed", "dtype", "device"} {
		if _, ok := got[k]; !ok {
			t.Errorf("config lacks %s", k)
		}
	}
	if got["kl_beta"] != 0.05 {
		t.Errorf("kl_beta = %v", got["kl_beta"])
	}
}

func readString(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRunTrainerTimeoutKillsGroup(t *testing.T) {
	defer goleak.VerifyNone(t)
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	// A grandchild that would outlive a plain kill of the shell.
	script := `sleep 60 & echo $! > ` + pidFile + `; wait`
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := RunTrainer(ctx, TrainerSpec{
		Command: shellTrainer(script), Checkpoint: "tiny:0", OutputDir: filepath.Join(dir, "out"),
		WorkDir: filepath.Join(dir, "work"), Samples: testSamples(), Config: DefaultTrainerConfig(), KillGrace: time.Second,
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("took %v to stop", d)
	}
	pid := strings.TrimSpace(readString(t, pidFile))
	deadline := time.Now().Add(5 * time.Second)
	for {
		// /proc/PID disappears once the killed grandchild is reaped (by
		// init, since its parent shell died too); a zombie shows state Z.
		st, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil || bytes.Contains(st, []byte(") Z ")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %s still alive after the group kill", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRunTrainerSpecErrors(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full")
	if err := os.MkdirAll(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	base := TrainerSpec{Command: shellTrainer("exit 0"), Checkpoint: "tiny:0", OutputDir: filepath.Join(dir, "o"), WorkDir: dir, Samples: testSamples(), Config: DefaultTrainerConfig()}
	tests := []struct {
		name string
		mod  func(*TrainerSpec)
		text string
	}{
		{"no checkpoint", func(s *TrainerSpec) { s.Checkpoint = "" }, "Checkpoint"},
		{"non-empty output", func(s *TrainerSpec) { s.OutputDir = full }, "not empty"},
		{"no samples", func(s *TrainerSpec) { s.Samples = nil }, "no samples"},
		{"zero config", func(s *TrainerSpec) { s.Config = TrainerConfig{} }, "inner_steps"},
		{"bad metrics source", func(s *TrainerSpec) { s.Metrics = "socket" }, "socket"},
		{"bad sample", func(s *TrainerSpec) { s.Samples = []Sample{{SampleID: "x", Role: "critic"}} }, "sample 0 (x): field role"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			tc.mod(&s)
			_, err := RunTrainer(context.Background(), s)
			if err == nil || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.text)
			}
		})
	}
}

func TestWriteBatch(t *testing.T) {
	good := testSamples()
	tests := []struct {
		name string
		mod  func([]Sample)
		text string
	}{
		{"nan advantage", func(s []Sample) { s[1].Advantage = math.NaN() }, "sample 1 (a2): field advantage"},
		{"inf reward", func(s []Sample) { s[0].Reward = math.Inf(1) }, "sample 0 (a1): field reward"},
		{"negative weight", func(s []Sample) { s[2].Weight = -1 }, "field weight"},
		{"no assistant", func(s []Sample) { s[1].Messages = []Message{{Role: "user", Content: "x"}} }, "no assistant"},
		{"bad message role", func(s []Sample) { s[0].Messages[0].Role = "narrator" }, "messages[0].role"},
		{"duplicate id", func(s []Sample) { s[2].SampleID = "a1" }, "duplicates sample 0"},
		{"empty group", func(s []Sample) { s[0].Group = "" }, "field group"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := testSamples()
			for i := range s {
				s[i].Messages = append([]Message(nil), s[i].Messages...)
			}
			tc.mod(s)
			err := WriteBatch(&bytes.Buffer{}, s)
			if err == nil || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("err = %v, want %q", err, tc.text)
			}
		})
	}
	var buf bytes.Buffer
	if err := WriteBatch(&buf, good); err != nil {
		t.Fatal(err)
	}
	want := `{"sample_id":"a2","role":"agent","group":"env1","messages":[{"role":"user","content":"obs: door"},{"role":"assistant","content":"wait"}],"reward":0,"advantage":-1,"weight":1}`
	if lines := strings.Split(buf.String(), "\n"); lines[1] != want {
		t.Errorf("line 2 = %s\nwant     %s", lines[1], want)
	}
}

func TestParseMetricsLine(t *testing.T) {
	tests := []struct {
		line  string
		event bool
		bad   bool
		step  int
	}{
		{line: `{"step":3,"loss":-0.5,"kl":0.01,"clip_fraction":0.1,"grad_norm":2,"tokens":100,"tokens_per_s":1e4,"peak_memory_bytes":123,"lr":1e-6}`, step: 3},
		{line: `  {"step":1,"new_key":[1,2]}  `, step: 1},
		{line: `{"event":"done","files":[]}`, event: true},
		{line: `{"loss":1}`, bad: true},
		{line: `[1,2]`, bad: true},
		{line: `null`, bad: true},
		{line: `{"step":1,"loss":NaN}`, bad: true},
		{line: `{"step":1,"tokens":"many"}`, bad: true},
		{line: ``, bad: true},
	}
	for _, tc := range tests {
		t.Run(tc.line, func(t *testing.T) {
			m, ev, err := ParseMetricsLine([]byte(tc.line))
			if tc.bad {
				if !errors.Is(err, ErrBadMetrics) {
					t.Fatalf("err = %v, want ErrBadMetrics", err)
				}
				return
			}
			if err != nil || ev != tc.event || m.Step != tc.step {
				t.Fatalf("got %+v event=%v err=%v", m, ev, err)
			}
			if !ev && !json.Valid(m.Raw) {
				t.Errorf("Raw %q not valid JSON", m.Raw)
			}
		})
	}
}

func FuzzParseMetricsLine(f *testing.F) {
	for _, s := range []string{`{"step":1,"loss":0.5}`, `{"event":"done"}`, `{"step":"x"}`, `{}`, `[`, `{"step":1e309}`, "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		m, ev, err := ParseMetricsLine(line)
		if err != nil {
			if !errors.Is(err, ErrBadMetrics) {
				t.Fatalf("error %v does not wrap ErrBadMetrics", err)
			}
			return
		}
		if !ev && !json.Valid(m.Raw) {
			t.Fatalf("accepted line has invalid Raw %q", m.Raw)
		}
	})
}

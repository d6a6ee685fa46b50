package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spade-pipeline/spade/internal/pyenv"
)

// GPUGRPOCommand is the command that measures one GRPO optimiser step of
// the trainer's own path (packed micro-batches, FSDP2 on one GPU) on a GPU:
// tokens/s and MFU, Qwen3-0.6B shape (--shape 4b for Qwen3-4B's), 64 x
// 4,096 tokens; it needs CUDA and is not run by `make bench`
// (docs/benchmarks.md, section 6).
const GPUGRPOCommand = "/opt/spade/venv/bin/python scripts/gpu_grpo_bench.py --json"

// BenchmarkGRPOSmoke runs scripts/gpu_grpo_bench.py --cpu-smoke: a tiny
// model on the CPU. It checks the GPU benchmark script runs end to end; its
// figures say nothing about GPU throughput.
func BenchmarkGRPOSmoke(b *testing.B) {
	for range b.N {
		cmd := exec.Command(pyenv.Python(), filepath.Join(repoRoot(b), "scripts/gpu_grpo_bench.py"), "--cpu-smoke", "--json")
		var out []byte
		var err error
		wall, _ := measure(b, func() { out, err = cmd.Output() })
		if err != nil {
			b.Fatalf("gpu_grpo_bench.py --cpu-smoke: %v\n%s", err, out)
		}
		var res struct {
			TokensPerS float64   `json:"tokens_per_s"`
			StepS      []float64 `json:"step_s_all"`
			Params     int64     `json:"parameters"`
			Device     string    `json:"device"`
		}
		if err := json.Unmarshal(out, &res); err != nil || res.Device != "cpu" || len(res.StepS) == 0 {
			b.Fatalf("gpu_grpo_bench.py --cpu-smoke printed %q: %v", out, err)
		}
		const s = "6. GRPO (GPU not run here)"
		rec.Add(s, fmt.Sprintf("--cpu-smoke step time (%d-parameter model, sanity check only)", res.Params), "s", res.StepS, Target{}, fmt.Sprintf("%.0f tokens/s; whole script %.1f s; GPU command: %s", res.TokensPerS, wall.Seconds(), GPUGRPOCommand))
	}
}

// BenchmarkTrainerRound measures issue 24's target: the grpo stage of the
// default round (24 environments, procedural model) with grpo.trainer
// torch on the tiny model (tiny:0: transformers' Qwen3 in a 2-layer shape
// with the tiny byte-level BPE tokenizer, vocabulary 4,096) must take
// under 60 s of CPU, the trainer's processes included. Rounds 0 and 1 up
// to pool run once per variant (not timed); `spade stage grpo` then runs
// alone in fresh copies of that store, so its CPU is the trainer's. Per
// repetition (BENCH_TRAINER_REPS, default 3) three variants run side by
// side: tiny:0 with the trainer's default attention (varlen_sdpa); tiny:0
// with grpo.attn_implementation sdpa, transformers' block-diagonal mask
// over each packed row (the trainer's attention before varlen_sdpa); and
// the tiny model over the byte tokenizer (one token per UTF-8 byte, the
// tiny model before its BPE and the workload the issue measured: a
// checkpoint directory written by checkpoint.write_tiny with
// tokenizer.byte_tokenizer, same seed and weights as the old tiny:0).
// With BENCH_BASELINE=REV (the old trainer: e7ffb12, the last commit
// before issue 24, padded micro-batches, its built-in Qwen3 and byte
// tokenizer), REV's binary prepares its own default round and runs its
// grpo stage once after the repetitions, with the venv's interpreter and
// grpo.timeout_s BENCH_TRAINER_BASELINE_TIMEOUT_S (default 900): a run
// killed by the timeout is recorded with its CPU as a lower bound.
// Needs the venv (make venv); skipped without it.
func BenchmarkTrainerRound(b *testing.B) {
	py := pyenv.Require(b, "torch", "transformers")
	bin := spadeBinary(b)
	reps := 3
	if v, err := strconv.Atoi(os.Getenv("BENCH_TRAINER_REPS")); err == nil && v > 0 {
		reps = v
	}
	bytesCkpt := filepath.Join(b.TempDir(), "tiny-bytes-0")
	mk := exec.Command(py, "-c", "import sys\nfrom spade_trainer import checkpoint as ck\nfrom spade_trainer.tokenizer import byte_tokenizer\nck.write_tiny(sys.argv[1], 0, byte_tokenizer())", bytesCkpt)
	mk.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(repoRoot(b), "trainer"))
	if out, err := mk.CombinedOutput(); err != nil {
		b.Fatalf("write the byte-level tiny checkpoint: %v\n%s", err, out)
	}
	const s = "8. the trainer on the default round (CPU)"
	for range b.N {
		variants := []struct{ name, ckpt, attn string }{
			{"tiny:0, attention varlen_sdpa (default)", "tiny:0", ""},
			{"tiny:0, attention sdpa (block-diagonal mask)", "tiny:0", "sdpa"},
			{"byte-tokenizer tiny model (the issue's workload), attention varlen_sdpa", bytesCkpt, ""},
		}
		envOf := func(i int) []string {
			return []string{"SPADE_GRPO_TRAINER=torch", "SPADE_GRPO_BASE_CHECKPOINT=" + variants[i].ckpt, "SPADE_GRPO_ATTN_IMPLEMENTATION=" + variants[i].attn}
		}
		// grpo.base_checkpoint and grpo.attn_implementation are pinned, so
		// each variant's run is created with them: one prepared store per
		// variant.
		bases := make([]string, len(variants))
		for i := range variants {
			bases[i] = b.TempDir()
			prepareGRPO(b, bin, bases[i], envOf(i))
		}
		wall := make([][]float64, len(variants))
		cpuS := make([][]float64, len(variants))
		ratios := make([][]float64, len(variants))
		for range reps {
			for i := range variants {
				store := b.TempDir()
				if err := os.CopyFS(store, os.DirFS(bases[i])); err != nil {
					b.Fatal(err)
				}
				r := runSpade(b, bin, store, envOf(i), "stage", "grpo", "--round", "1")
				wall[i] = append(wall[i], r.wall.Seconds())
				cpuS[i] = append(cpuS[i], r.cpu.Seconds())
			}
			for i := 1; i < len(variants); i++ {
				ratios[i] = append(ratios[i], cpuS[i][len(cpuS[i])-1]/cpuS[0][len(cpuS[0])-1])
			}
		}
		for i, v := range variants {
			target := Target{}
			if i == 0 {
				target = AtMost(60)
			}
			rec.Add(s, "24 environments, spade stage grpo, torch trainer, "+v.name+": CPU incl. the trainer", "CPU-s", cpuS[i], target, "")
			rec.Add(s, "24 environments, spade stage grpo, torch trainer, "+v.name+": wall clock", "s", wall[i], Target{}, "")
			if i > 0 {
				rec.Add(s, "CPU of "+v.name+" / CPU of the default, same repetition", "x", ratios[i], Target{}, "")
			}
		}
		if old := baselineBinary(b); old != "" {
			baselineTrainerRound(b, old, py, s, cpuS[0], cpuS[2])
		}
	}
}

// prepareGRPO runs round 0's corpus (sealed) and round 1's stages up to
// pool with bin in store, so that `spade stage grpo --round 1` is what
// remains to measure.
func prepareGRPO(b *testing.B, bin, store string, env []string) {
	b.Helper()
	runSpade(b, bin, store, env, "stage", "corpus", "--round", "0")
	runSpade(b, bin, store, env, "commit", "--round", "0", "--stage", "corpus", "--seal")
	for _, st := range []string{"sample", "design", "validate", "hint", "rollout", "label", "memory", "pool"} {
		runSpade(b, bin, store, env, "stage", st, "--round", "1")
	}
}

// baselineTrainerRound is BenchmarkTrainerRound's old-trainer run (see
// there): it records the baseline's CPU and its ratios to the medians of
// cur (the default variant's CPU-s) and bytes (the byte-tokenizer
// variant's).
func baselineTrainerRound(b *testing.B, old, py, section string, cur, bytes []float64) {
	b.Helper()
	timeout := 900
	if v, err := strconv.Atoi(os.Getenv("BENCH_TRAINER_BASELINE_TIMEOUT_S")); err == nil && v > 0 {
		timeout = v
	}
	env := []string{"SPADE_GRPO_TRAINER=torch", "SPADE_GRPO_BASE_CHECKPOINT=tiny:0", "SPADE_GRPO_PYTHON=" + py, "SPADE_GRPO_TIMEOUT_S=" + strconv.Itoa(timeout)}
	store := b.TempDir()
	prepareGRPO(b, old, store, env)
	r, stderr, err := runSpadeErr(b, old, store, env, "stage", "grpo", "--round", "1")
	name := "old trainer (" + os.Getenv("BENCH_BASELINE") + ": padded micro-batches, built-in Qwen3, byte tokenizer) on its default round"
	note := "finished"
	bound := ""
	if err != nil {
		if !strings.Contains(stderr, "deadline exceeded") {
			b.Fatalf("baseline spade stage grpo: %v\n%s", err, stderr)
		}
		note = fmt.Sprintf("killed by grpo.timeout_s %d s before it finished: the CPU is a lower bound", timeout)
		bound = "at least "
	}
	c := r.cpu.Seconds()
	rec.Add(section, name+": CPU incl. the trainer", "CPU-s", []float64{c}, Target{}, note)
	rec.Add(section, name+": wall clock", "s", []float64{r.wall.Seconds()}, Target{}, note)
	rec.Add(section, "CPU of the old trainer / CPU of the default (median)", "x", []float64{c / Median(cur)}, Target{}, bound+"this ratio")
	rec.Add(section, "CPU of the old trainer / CPU of the byte-tokenizer tiny model (median)", "x", []float64{c / Median(bytes)}, Target{}, bound+"this ratio")
}

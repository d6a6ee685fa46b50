package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
// torch on the tiny model (tiny:0, transformers' Qwen3 in a 2-layer shape)
// must take under 60 s of CPU, the trainer's processes included. Rounds 0
// and 1 up to pool run once per variant (not timed); `spade stage grpo` then runs alone
// in fresh copies of that store, so its CPU is the trainer's: per
// repetition (BENCH_TRAINER_REPS, default 3) once with the trainer's
// default attention (varlen_sdpa) and once with grpo.attn_implementation
// sdpa, transformers' block-diagonal mask over each packed row (the
// trainer's attention before varlen_sdpa), side by side. Needs the venv
// (make venv); skipped without it.
func BenchmarkTrainerRound(b *testing.B) {
	pyenv.Require(b, "torch", "transformers")
	bin := spadeBinary(b)
	env := []string{"SPADE_GRPO_TRAINER=torch", "SPADE_GRPO_BASE_CHECKPOINT=tiny:0"}
	reps := 3
	if v, err := strconv.Atoi(os.Getenv("BENCH_TRAINER_REPS")); err == nil && v > 0 {
		reps = v
	}
	const s = "8. the trainer on the default round (CPU)"
	for range b.N {
		variants := []struct{ name, attn string }{{"varlen_sdpa (default)", ""}, {"sdpa (block-diagonal mask)", "sdpa"}}
		// grpo.attn_implementation is pinned, so each variant's run is
		// created with it: one prepared store per variant.
		bases := make([]string, len(variants))
		for i, v := range variants {
			bases[i] = b.TempDir()
			venv := append(env, "SPADE_GRPO_ATTN_IMPLEMENTATION="+v.attn)
			runSpade(b, bin, bases[i], venv, "stage", "corpus", "--round", "0")
			runSpade(b, bin, bases[i], venv, "commit", "--round", "0", "--stage", "corpus", "--seal")
			for _, st := range []string{"sample", "design", "validate", "hint", "rollout", "label", "memory", "pool"} {
				runSpade(b, bin, bases[i], venv, "stage", st, "--round", "1")
			}
		}
		wall := make([][]float64, len(variants))
		cpuS := make([][]float64, len(variants))
		var ratio []float64
		for range reps {
			for i, v := range variants {
				store := b.TempDir()
				if err := os.CopyFS(store, os.DirFS(bases[i])); err != nil {
					b.Fatal(err)
				}
				r := runSpade(b, bin, store, append(env, "SPADE_GRPO_ATTN_IMPLEMENTATION="+v.attn), "stage", "grpo", "--round", "1")
				wall[i] = append(wall[i], r.wall.Seconds())
				cpuS[i] = append(cpuS[i], r.cpu.Seconds())
			}
			ratio = append(ratio, cpuS[1][len(cpuS[1])-1]/cpuS[0][len(cpuS[0])-1])
		}
		for i, v := range variants {
			target := Target{}
			if i == 0 {
				target = AtMost(60)
			}
			rec.Add(s, "24 environments, spade stage grpo, torch trainer (tiny:0), attention "+v.name+": CPU incl. the trainer", "CPU-s", cpuS[i], target, "")
			rec.Add(s, "24 environments, spade stage grpo, torch trainer (tiny:0), attention "+v.name+": wall clock", "s", wall[i], Target{}, "")
		}
		rec.Add(s, "CPU of sdpa / CPU of varlen_sdpa, same repetition", "x", ratio, Target{}, "")
	}
}

package bench

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spade-pipeline/spade/internal/pyenv"
)

// GPUGRPOCommand is the command that measures one GRPO optimiser step on a
// GPU (tokens/s and MFU, Qwen3-0.6B shape, 64 x 2,048 tokens); it needs
// CUDA and is not run by `make bench` (docs/benchmarks.md, section 6).
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

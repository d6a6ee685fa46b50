"""Tests of scripts/gpu_grpo_bench.py on CPU (the GPU run is manual)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(REPO, "scripts", "gpu_grpo_bench.py")
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(SCRIPT))
import gpu_grpo_bench as bench  # noqa: E402


class BenchTest(unittest.TestCase):
    def test_cpu_smoke_runs_and_reports(self):
        r = subprocess.run([sys.executable, SCRIPT, "--cpu-smoke", "--steps", "2", "--warmup", "1", "--peak-tflops", "1", "--json"],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        res = json.loads(r.stdout.strip().splitlines()[-1])
        self.assertEqual(res["tokens_per_step"], 4 * 64)
        self.assertEqual(len(res["step_s_all"]), 2)
        self.assertGreater(res["tokens_per_s"], 0)
        self.assertAlmostEqual(res["mfu"], res["achieved_tflops"] / 1.0)
        self.assertTrue(res["loss"] == res["loss"])
        self.assertEqual((res["attention"], res["micro_batches"], res["fsdp"]), ("varlen_sdpa", 2, False))

    def test_cpu_smoke_fsdp_gives_the_same_step(self):
        """--fsdp shards the model with the trainer's FSDP2 code over a
        one-rank gloo group: the same loss and grad norm as without."""
        out = []
        for extra in ([], ["--fsdp"]):
            r = subprocess.run([sys.executable, SCRIPT, "--cpu-smoke", "--steps", "1", "--warmup", "0", "--json", *extra],
                               capture_output=True, text=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr)
            out.append(json.loads(r.stdout.strip().splitlines()[-1]))
        self.assertTrue(out[1]["fsdp"])
        self.assertAlmostEqual(out[0]["loss"], out[1]["loss"], places=6)
        self.assertAlmostEqual(out[0]["grad_norm"], out[1]["grad_norm"], places=5)

    @unittest.skipIf(torch.cuda.is_available(), "machine has CUDA")
    def test_without_cuda_exits_2(self):
        r = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 2)
        self.assertIn("CUDA is not available", r.stderr)

    def test_default_config_and_flops(self):
        cfg = bench.bench_config(False)
        self.assertEqual(bench.num_parameters(cfg), 596049920)
        self.assertEqual(bench.num_parameters(bench.bench_config(False, "4b")), 4022468096)
        self.assertEqual(sum(p.numel() for p in bench.build_model(bench.bench_config(True), "sdpa", torch.device("cpu"), 0).parameters()), bench.num_parameters(bench.bench_config(True)))
        # 6 P T + 6 * layers * S * (heads * head_dim) * T
        T, S = 64 * 2048, 2048
        want = 6 * 596049920 * T + 6 * 28 * S * 16 * 128 * T
        self.assertEqual(bench.model_flops_per_step(cfg, T, S), want)

    def test_peak_table(self):
        self.assertEqual(bench.peak_tflops_for("NVIDIA H200"), 989.0)
        self.assertEqual(bench.peak_tflops_for("NVIDIA H100 PCIe"), 756.0)
        self.assertEqual(bench.peak_tflops_for("NVIDIA H100 80GB HBM3"), 989.0)
        self.assertIsNone(bench.peak_tflops_for("Tesla T4"))


if __name__ == "__main__":
    unittest.main()

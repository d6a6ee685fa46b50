#!/usr/bin/env python3
"""GPU benchmark of one SPADE GRPO optimiser step: tokens/s and MFU.

Model (default): random-initialised Qwen3 architecture in Qwen3-0.6B's shape,
transformers' Qwen3ForCausalLM (the trainer's model class since the
hand-written one was removed), SDPA attention:

    hidden 1024, 28 layers, 16 query heads / 8 KV heads of dim 128,
    SwiGLU intermediate 3072, vocab 151936, tied embeddings
    = 596,049,920 parameters (440,467,456 outside the embedding).

Batch (default): 64 sequences x 2,048 tokens, the first quarter of each
sequence is prompt (not trained), micro-batches of 8 sequences with gradient
accumulation, bf16 autocast over fp32 master weights, fused AdamW, SDPA
(flash) attention, torch.compile of forward + log-prob + GRPO loss. One
timed step = all micro-batches' forward/backward + clip + optimiser step.
Warm-up steps (compilation, allocator growth) are excluded from timing; the
only host synchronisation in the timed loop is one at the end of each step.

MFU = model FLOPs / (seconds x peak dense bf16 FLOP/s), with

    model FLOPs per step = 6 x P x T  +  6 x n_layers x S x (n_heads x head_dim) x T

where P is the parameter count (every parameter is one matmul weight; the
tied embedding is counted once, as the LM head matmul; norm weights are
negligible), T the tokens in the step, S the sequence length. The second
term is causal attention: QK^T and AV are 2 x 2 x S x d FLOPs per token and
layer over the full S x S square in the forward pass, halved for the causal
mask, x 3 for forward + backward. Recomputation under activation
checkpointing is not counted (MFU, not hardware FLOPs utilisation).

Peak dense bf16 FLOP/s by device name (vendor spec sheets, without
sparsity): H200 / H100 SXM / GH200 989 TFLOP/s, H100 NVL 835, H100 PCIe
756, A100 312, L40S 362, B200 2250; override with --peak-tflops.

Exit status: 0 ok, 2 usage / no CUDA (unless --cpu-smoke, which runs a tiny
config on CPU so CI can test this script), 1 runtime failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "trainer"))

import torch  # noqa: E402

from spade_trainer.grpo import grpo_loss, make_optimizer, token_logps  # noqa: E402
from spade_trainer.config import TrainConfig  # noqa: E402
import transformers  # noqa: E402
from transformers import Qwen3Config  # noqa: E402

# torch >= 1.13 names CUDA OOM; older torch raises a plain RuntimeError.
OOM_ERROR = getattr(torch.cuda, "OutOfMemoryError", RuntimeError)

PEAK_BF16_TFLOPS = [
    # Most specific names first: matched as substrings of the CUDA name.
    ("GH200", 989.0),
    ("H200", 989.0),
    ("H100 NVL", 835.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("B200", 2250.0),
]


def peak_tflops_for(name: str):
    for key, tf in PEAK_BF16_TFLOPS:
        if key in name:
            return tf
    return None


def bench_config(smoke: bool) -> Qwen3Config:
    if smoke:
        return Qwen3Config(
            vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=10000.0, tie_word_embeddings=True,
        )
    # Qwen3-0.6B shape, see module doc.
    return Qwen3Config(
        vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
        num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
    )


def num_parameters(cfg: Qwen3Config) -> int:
    """Exact parameter count of a dense Qwen3 (tied embeddings once)."""
    h, i, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    q = cfg.num_attention_heads * cfg.head_dim
    kv = cfg.num_key_value_heads * cfg.head_dim
    layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h + 2 * cfg.head_dim
    total = v * h + cfg.num_hidden_layers * layer + h
    return total if cfg.tie_word_embeddings else total + v * h


def model_flops_per_step(cfg: Qwen3Config, tokens: int, seq_len: int) -> float:
    dense = 6.0 * num_parameters(cfg) * tokens
    attn = 6.0 * cfg.num_hidden_layers * seq_len * cfg.num_attention_heads * cfg.head_dim * tokens
    return dense + attn


def build_model(cfg: Qwen3Config, impl: str, device: torch.device, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    m = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.float32)
    return m.to(device)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu-smoke", action="store_true", help="tiny config on CPU (tests the script; no MFU unless --peak-tflops)")
    p.add_argument("--impl", choices=["transformers"], default="transformers")
    p.add_argument("--batch", type=int, help="sequences per step (default 64; smoke 4)")
    p.add_argument("--seq-len", type=int, help="tokens per sequence (default 2048; smoke 64)")
    p.add_argument("--micro-batch", type=int, help="sequences per forward/backward (default 8; smoke 2)")
    p.add_argument("--steps", type=int, default=5, help="timed steps (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="untimed warm-up steps (default 2)")
    p.add_argument("--compile", dest="compile", action="store_true", default=None, help="torch.compile (default on CUDA when available)")
    p.add_argument("--no-compile", dest="compile", action="store_false")
    p.add_argument("--grad-ckpt", action="store_true", help="activation checkpointing per layer")
    p.add_argument("--peak-tflops", type=float, help="peak dense bf16 TFLOP/s (overrides the device table)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print only one JSON result line")
    a = p.parse_args(argv)

    if a.cpu_smoke:
        device = torch.device("cpu")
        amp = None
        a.batch = a.batch or 4
        a.seq_len = a.seq_len or 64
        a.micro_batch = a.micro_batch or 2
    else:
        if not torch.cuda.is_available():
            print("gpu_grpo_bench: CUDA is not available (use --cpu-smoke to test the script on CPU)", file=sys.stderr)
            return 2
        device = torch.device("cuda")
        amp = torch.bfloat16
        a.batch = a.batch or 64
        a.seq_len = a.seq_len or 2048
        a.micro_batch = a.micro_batch or 8
    if a.batch % a.micro_batch or min(a.batch, a.seq_len, a.micro_batch, a.steps) < 1 or a.warmup < 0:
        print("gpu_grpo_bench: need batch a multiple of micro-batch and positive sizes", file=sys.stderr)
        return 2
    use_compile = a.compile if a.compile is not None else (device.type == "cuda" and hasattr(torch, "compile"))
    if use_compile and not hasattr(torch, "compile"):
        print("gpu_grpo_bench: --compile needs torch >= 2.0", file=sys.stderr)
        return 2

    cfg = bench_config(a.cpu_smoke)
    torch.manual_seed(a.seed)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    model = build_model(cfg, a.impl, device, a.seed)
    model.train()
    if a.grad_ckpt:
        model.gradient_checkpointing_enable()
    params = [q for q in model.parameters() if q.requires_grad]
    n_params = sum(q.numel() for q in params)
    tcfg = TrainConfig(lr=1e-6, grad_clip=1.0)
    opt = make_optimizer(params, tcfg, device)

    # Synthetic GRPO batch: random tokens, trained tail (prompt = first
    # quarter), one advantage per sequence, weights 1.
    g = torch.Generator().manual_seed(a.seed)
    n_micro = a.batch // a.micro_batch
    ids = torch.randint(0, cfg.vocab_size, (n_micro, a.micro_batch, a.seq_len), generator=g).to(device)
    mask = torch.zeros(n_micro, a.micro_batch, a.seq_len - 1)
    mask[..., a.seq_len // 4 :] = 1.0
    mask = mask.to(device)
    adv = torch.randn(n_micro, a.micro_batch, generator=g).to(device)
    weight = torch.ones(n_micro, a.micro_batch, device=device)
    norm_tokens = float(mask.sum())
    tokens_per_step = a.batch * a.seq_len

    def logits_of(x):
        return model(input_ids=x, use_cache=False).logits

    def micro_loss(x, m, av, w):
        if amp is not None:
            with torch.autocast(device_type=device.type, dtype=amp):
                logits = logits_of(x)
        else:
            logits = logits_of(x)
        logp = token_logps(logits[:, :-1], x[:, 1:])
        # First inner step of a round: logp_old is the detached logp itself.
        loss, _ = grpo_loss(logp, logp.detach(), None, av, w, m, 0.2, 0.0, norm_tokens)
        return loss

    step_loss = torch.compile(micro_loss) if use_compile else micro_loss

    def one_step():
        opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device=device)
        for j in range(n_micro):
            loss = step_loss(ids[j], mask[j], adv[j], weight[j])
            loss.backward()
            total += loss.detach()
        gn = torch.nn.utils.clip_grad_norm_(params, tcfg.grad_clip)
        opt.step()
        return total, gn

    if not a.json:
        print(f"device: {torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}; torch {torch.__version__}; impl {a.impl}; compile {use_compile}; grad-ckpt {a.grad_ckpt}")
        print(f"model: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, heads {cfg.num_attention_heads}/{cfg.num_key_value_heads}x{cfg.head_dim}, "
              f"intermediate {cfg.intermediate_size}, vocab {cfg.vocab_size}; parameters {n_params:,}")
        print(f"batch: {a.batch} x {a.seq_len} tokens, micro-batch {a.micro_batch} ({n_micro} accumulation steps)")
    try:
        t0 = time.perf_counter()
        for _ in range(a.warmup):
            one_step()
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        warm_s = time.perf_counter() - t0
        times = []
        for _ in range(a.steps):
            s = time.perf_counter()
            loss, gn = one_step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - s)
        loss_v, gn_v = float(loss), float(gn)
    except OOM_ERROR as e:
        print(f"gpu_grpo_bench: {type(e).__name__}: {e}; try a smaller --micro-batch or --grad-ckpt", file=sys.stderr)
        return 1
    if not (loss_v == loss_v and gn_v == gn_v):
        print(f"gpu_grpo_bench: non-finite loss {loss_v} / grad norm {gn_v}", file=sys.stderr)
        return 1
    step_s = sorted(times)[len(times) // 2]  # median
    flops = model_flops_per_step(cfg, tokens_per_step, a.seq_len)
    peak = a.peak_tflops
    if peak is None and device.type == "cuda":
        peak = peak_tflops_for(torch.cuda.get_device_name(device))
    achieved = flops / step_s / 1e12
    mfu = achieved / peak if peak else None
    result = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "impl": a.impl,
        "compile": bool(use_compile),
        "grad_ckpt": a.grad_ckpt,
        "parameters": n_params,
        "batch": a.batch,
        "seq_len": a.seq_len,
        "micro_batch": a.micro_batch,
        "tokens_per_step": tokens_per_step,
        "warmup_s": round(warm_s, 3),
        "step_s_median": step_s,
        "step_s_all": times,
        "tokens_per_s": tokens_per_step / step_s,
        "model_tflops_per_step": flops / 1e12,
        "achieved_tflops": achieved,
        "peak_tflops": peak,
        "mfu": mfu,
        "peak_memory_bytes": int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None,
        "loss": loss_v,
        "grad_norm": gn_v,
    }
    if not a.json:
        print(f"warm-up: {a.warmup} steps in {warm_s:.1f} s (excluded)")
        print(f"step: median {step_s:.3f} s over {a.steps} steps; {result['tokens_per_s']:,.0f} tokens/s; {achieved:.1f} model TFLOP/s")
        if mfu is not None:
            print(f"MFU: {100 * mfu:.1f}% of {peak:.0f} TFLOP/s peak dense bf16")
        else:
            print("MFU: n/a (unknown device peak; pass --peak-tflops)")
        if result["peak_memory_bytes"] is not None:
            print(f"peak memory: {result['peak_memory_bytes'] / 2**30:.1f} GiB")
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

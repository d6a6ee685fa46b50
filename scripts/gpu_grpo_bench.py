#!/usr/bin/env python3
"""GPU benchmark of one SPADE GRPO optimiser step: tokens/s and MFU.

It drives the trainer's own code path (trainer/spade_trainer): the batch is
packed into micro-batches by token budget (grpo.make_micro_batches), the
attention is the trainer's default (attention.default_implementation:
flash_attention_2 when flash_attn imports, else varlen_sdpa), the step is
grpo.train_round (forward, log-probs, clipped surrogate, backward per
micro-batch, gradient clipping, AdamW), and on CUDA the model is sharded
with FSDP2 (dist.shard: bf16 parameters, fp32 gradient reduction) in a
one-process group, as under torchrun. Model: random-initialised
transformers Qwen3ForCausalLM in one of two shapes (--shape):

    0.6b: hidden 1024, 28 layers, 16 query heads / 8 KV heads of dim 128,
          SwiGLU intermediate 3072, vocab 151936, tied embeddings
          = 596,049,920 parameters
    4b:   hidden 2560, 36 layers, 32 / 8 heads of dim 128, intermediate
          9728, vocab 151936, tied embeddings = 4,022,468,096 parameters

Batch (default): 64 samples x 4,096 tokens, the first quarter of each is
prompt (not trained), micro-batches of at most 16,384 tokens (4 samples;
gradients accumulate), one advantage per sample. Warm-up steps (allocator
growth, compilation with --compile) are excluded from timing; one timed
step = one train_round call with one inner step, whose only host
synchronisation is its one per optimiser step.

MFU = model FLOPs / (seconds x peak dense bf16 FLOP/s), with

    model FLOPs per step = 6 x P x T  +  6 x n_layers x S x (n_heads x head_dim) x T

where P is the parameter count (every parameter is one matmul weight; the
tied embedding is counted once, as the LM head matmul; norm weights are
negligible), T the tokens in the step, S the sample length. The second
term is causal attention: QK^T and AV are 2 x 2 x S x d FLOPs per token and
layer over the full S x S square in the forward pass, halved for the causal
mask, x 3 for forward + backward. Packed samples attend only inside
themselves, so S is the sample length, not the micro-batch's.
Recomputation under activation checkpointing is not counted (MFU, not
hardware FLOPs utilisation).

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

from spade_trainer import attention  # noqa: E402
from spade_trainer import checkpoint as ck  # noqa: E402
from spade_trainer import dist as D  # noqa: E402
from spade_trainer.config import TrainConfig  # noqa: E402
from spade_trainer.grpo import Encoded, make_micro_batches, make_optimizer, train_round  # noqa: E402
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


def bench_config(smoke: bool, shape: str = "0.6b") -> Qwen3Config:
    """The model config: a tiny one for --cpu-smoke, else Qwen3-0.6B's or
    Qwen3-4B's shape (module doc)."""
    if smoke:
        return Qwen3Config(
            vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, rope_theta=10000.0, tie_word_embeddings=True,
        )
    if shape == "4b":
        return Qwen3Config(
            vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
            num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True,
        )
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


def build_model(cfg: Qwen3Config, attn: str, device: torch.device, seed: int) -> torch.nn.Module:
    """Random-initialised Qwen3ForCausalLM in float32 on ``device`` with
    attention ``attn`` (registered first when it is the trainer's own)."""
    if attn == attention.NAME:
        attention.register()
    torch.manual_seed(seed)
    m = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation=attn, dtype=torch.float32)
    m.config.use_cache = False
    return m.to(device)


def synthetic_batch(n: int, seq_len: int, vocab: int, seed: int):
    """n samples of seq_len random tokens, the last three quarters trained,
    one N(0, 1) advantage each, weight 1 (grpo.Encoded)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(0, vocab, (seq_len,), generator=g).tolist()
        mask = [0] * (seq_len // 4) + [1] * (seq_len - seq_len // 4)
        out.append(Encoded(ids, mask, float(torch.randn((), generator=g)), 1.0))
    return out


def one_rank_group(device: torch.device) -> None:
    """A process group of one rank (as torchrun with --nproc_per_node 1
    makes it), so that FSDP2 can shard over it."""
    import socket

    import torch.distributed as dist

    if dist.is_initialized():
        return
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(port))
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)


def parse_args(argv=None) -> argparse.Namespace:
    """The command line (module doc); sizes left unset get their defaults
    in pick_device."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu-smoke", action="store_true", help="tiny config on CPU (tests the script; no MFU unless --peak-tflops)")
    p.add_argument("--shape", choices=["0.6b", "4b"], default="0.6b", help="model shape (default 0.6b)")
    p.add_argument("--batch", type=int, help="samples per step (default 64; smoke 4)")
    p.add_argument("--seq-len", type=int, help="tokens per sample (default 4096; smoke 64)")
    p.add_argument("--max-tokens", type=int, help="token budget of one packed micro-batch (default 16384; smoke 128)")
    p.add_argument("--attn", help="attention implementation (default: the trainer's, attention.default_implementation)")
    p.add_argument("--fsdp", dest="fsdp", action="store_true", default=None, help="FSDP2 over a one-rank group (default on CUDA)")
    p.add_argument("--no-fsdp", dest="fsdp", action="store_false")
    p.add_argument("--steps", type=int, default=5, help="timed steps (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="untimed warm-up steps (default 2)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (grpo.compile)")
    p.add_argument("--grad-ckpt", action="store_true", help="activation checkpointing per layer (grpo.gradient_checkpointing)")
    p.add_argument("--peak-tflops", type=float, help="peak dense bf16 TFLOP/s (overrides the device table)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print only one JSON result line")
    return p.parse_args(argv)


def pick_device(a: argparse.Namespace):
    """The device (CPU for --cpu-smoke, else CUDA), with a's unset sizes
    filled in for it; None, after a message on stderr, when CUDA is
    missing or a size is out of range (exit status 2)."""
    if a.cpu_smoke:
        device = torch.device("cpu")
        a.batch = a.batch or 4
        a.seq_len = a.seq_len or 64
        a.max_tokens = a.max_tokens or 128
    else:
        if not torch.cuda.is_available():
            print("gpu_grpo_bench: CUDA is not available (use --cpu-smoke to test the script on CPU)", file=sys.stderr)
            return None
        device = torch.device("cuda")
        a.batch = a.batch or 64
        a.seq_len = a.seq_len or 4096
        a.max_tokens = a.max_tokens or 16384
    if min(a.batch, a.seq_len, a.max_tokens, a.steps) < 1 or a.seq_len < 4 or a.warmup < 0:
        print("gpu_grpo_bench: need positive sizes (seq-len >= 4) and warmup >= 0", file=sys.stderr)
        return None
    return device


def bench_train_config(max_tokens: int) -> TrainConfig:
    """The step's trainer settings, every field given (TrainConfig has no
    defaults: the grpo stage's come from Go): lr 1e-6, the symmetric clip
    0.2, no KL, gradient clip 1.0, one inner step, AdamW (0.9, 0.999,
    1e-8) without weight decay, and a token budget of max_tokens per
    packed micro-batch. Only the fields train_round and make_optimizer
    read matter here; the others are the grpo stage's values."""
    return TrainConfig(
        lr=1e-6, clip_epsilon=0.2, clip_epsilon_high=0.0, kl_beta=0.0, grad_clip=1.0, inner_steps=1,
        micro_batch_size=1024, max_tokens_per_micro_batch=max_tokens, seed=0, dtype="auto", device="auto",
        weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999, adam_eps=1e-8, max_seq_len=8192, overlong="truncate_left",
        save_dtype="bfloat16", reference_checkpoint="", attn_implementation="", gradient_checkpointing=False,
        offload=False, compile=False, resume_optimizer=True, save_optimizer=True, tis_cap=0.0, mismatch_warn=0.1,
        loss_aggregation="token_mean", train_reasoning="generated", agent_samples="play",
    )


def prepare_model(a: argparse.Namespace, cfg: Qwen3Config, device: torch.device, fsdp: bool, dtype):
    """Seed torch, build the model (build_model) with a.attn or the
    trainer's default attention, turn on activation checkpointing with
    --grad-ckpt and shard it with FSDP2 when fsdp; return (model, its
    trainable parameters, the attention implementation)."""
    torch.manual_seed(a.seed)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    attn = a.attn or attention.default_implementation(device)
    model = build_model(cfg, attn, device, a.seed)
    if a.grad_ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if fsdp:
        one_rank_group(device)
        D.shard(model, dtype, False)
    model.train()
    params = [q for q in model.parameters() if q.requires_grad]
    return model, params, attn


def time_steps(one_step, a: argparse.Namespace, device: torch.device):
    """Run a.warmup untimed steps, then a.steps timed ones; return
    (warm-up seconds, each timed step's seconds, the last step's
    metrics), or None after a message on stderr when a step fails (out
    of memory or another RuntimeError). The process group is torn down
    either way."""
    try:
        t0 = time.perf_counter()
        for _ in range(a.warmup):
            one_step()
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        warm_s = time.perf_counter() - t0
        times = []
        last = {}
        for _ in range(a.steps):
            s = time.perf_counter()
            last = one_step()
            times.append(time.perf_counter() - s)
    except OOM_ERROR as e:
        print(f"gpu_grpo_bench: {type(e).__name__}: {e}; try a smaller --max-tokens or --grad-ckpt", file=sys.stderr)
        return None
    except RuntimeError as e:
        print(f"gpu_grpo_bench: {e}", file=sys.stderr)
        return None
    finally:
        D.teardown()
    return warm_s, times, last


def print_report(result: dict, a: argparse.Namespace, warm_s: float) -> None:
    """The human-readable lines after a run (not with --json); warm_s is
    the warm-up's seconds, unrounded."""
    print(f"warm-up: {a.warmup} steps in {warm_s:.1f} s (excluded)")
    print(f"step: median {result['step_s_median']:.3f} s over {a.steps} steps; {result['tokens_per_s']:,.0f} tokens/s; {result['achieved_tflops']:.1f} model TFLOP/s")
    if result["mfu"] is not None:
        print(f"MFU: {100 * result['mfu']:.1f}% of {result['peak_tflops']:.0f} TFLOP/s peak dense bf16")
    else:
        print("MFU: n/a (unknown device peak; pass --peak-tflops)")
    if result["peak_memory_bytes"] is not None:
        print(f"peak memory: {result['peak_memory_bytes'] / 2**30:.1f} GiB")


def main(argv=None) -> int:
    a = parse_args(argv)
    device = pick_device(a)
    if device is None:
        return 2
    fsdp = a.fsdp if a.fsdp is not None else device.type == "cuda"
    # bf16 compute: FSDP2's parameter dtype when sharded, else autocast.
    dtype = torch.bfloat16 if device.type == "cuda" else None

    cfg = bench_config(a.cpu_smoke, a.shape)
    model, params, attn = prepare_model(a, cfg, device, fsdp, dtype)
    n_params = sum(q.numel() for q in params)
    tcfg = bench_train_config(a.max_tokens)
    opt = make_optimizer(params, tcfg, device)
    fwd = torch.compile(model) if a.compile else model
    micro = make_micro_batches(synthetic_batch(a.batch, a.seq_len, cfg.vocab_size, a.seed), a.max_tokens, device)
    tokens_per_step = a.batch * a.seq_len

    def logits_fn(mb):
        return ck.model_logits(fwd, mb.ids, mb.position_ids, mb.cu_seq_lens, mb.max_len, mb.keep)

    def one_step():
        return train_round(logits_fn, params, opt, micro, tcfg, device, None if fsdp else dtype)[-1]

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    if not a.json:
        print(f"device: {name}; torch {torch.__version__}; transformers {transformers.__version__}; attention {attn}; fsdp {fsdp}; compile {a.compile}; grad-ckpt {a.grad_ckpt}")
        print(f"model: {cfg.num_hidden_layers} layers, hidden {cfg.hidden_size}, heads {cfg.num_attention_heads}/{cfg.num_key_value_heads}x{cfg.head_dim}, "
              f"intermediate {cfg.intermediate_size}, vocab {cfg.vocab_size}; parameters {n_params:,}")
        print(f"batch: {a.batch} x {a.seq_len} tokens, {len(micro)} packed micro-batches of <= {a.max_tokens} tokens")
    timed = time_steps(one_step, a, device)
    if timed is None:
        return 1
    warm_s, times, last = timed
    step_s = sorted(times)[len(times) // 2]  # median
    flops = model_flops_per_step(cfg, tokens_per_step, a.seq_len)
    peak = a.peak_tflops
    if peak is None and device.type == "cuda":
        peak = peak_tflops_for(name)
    achieved = flops / step_s / 1e12
    result = {
        "device": name,
        "shape": "smoke" if a.cpu_smoke else a.shape,
        "attention": attn,
        "fsdp": fsdp,
        "compile": a.compile,
        "grad_ckpt": a.grad_ckpt,
        "parameters": n_params,
        "batch": a.batch,
        "seq_len": a.seq_len,
        "max_tokens": a.max_tokens,
        "micro_batches": len(micro),
        "tokens_per_step": tokens_per_step,
        "warmup_s": round(warm_s, 3),
        "step_s_median": step_s,
        "step_s_all": times,
        "tokens_per_s": tokens_per_step / step_s,
        "model_tflops_per_step": flops / 1e12,
        "achieved_tflops": achieved,
        "peak_tflops": peak,
        "mfu": achieved / peak if peak else None,
        "peak_memory_bytes": int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None,
        "loss": last["loss"],
        "grad_norm": last["grad_norm"],
    }
    if not a.json:
        print_report(result, a, warm_s)
    print(json.dumps(result, sort_keys=True))
    return 0

if __name__ == "__main__":
    sys.exit(main())

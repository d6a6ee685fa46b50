"""Command line: one GRPO round from a batch file to a new checkpoint.

    python -m spade_trainer --batch B.jsonl --checkpoint DIR|tiny:SEED \\
        --output OUT_DIR --config CONFIG.json [--metrics METRICS.jsonl]

Metrics are JSON lines (one per inner optimiser step, then a final
{"event": "done", ...} line) written to --metrics, or to stdout when it is
absent. Exit status: 0 ok, 1 training/runtime failure, 2 bad input or usage.
Errors go to stderr as one line "spade_trainer: error: ...".
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from typing import List, Optional

import torch

from . import checkpoint as ck
from .config import InputError, as_json, load_batch, load_config
from .grpo import encode_batch, make_micro_batches, make_optimizer, train_round

TRAINER_ID = "spade_trainer/1"


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    d = torch.device(name)
    if d.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"config device {name!r}: CUDA is not available")
    return d


def _amp_dtype(name: str, device: torch.device) -> Optional[torch.dtype]:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    if name == "float32":
        return None
    return ck.DTYPES[name]


def _load(spec: str, backend: str, what: str) -> ck.Policy:
    """load_policy with a malformed or missing checkpoint (absent files,
    bad JSON, missing or mistyped config keys, corrupt safetensors) turned
    into an InputError naming it; ImportError (no transformers) stays a
    runtime failure."""
    try:
        return ck.load_policy(spec, backend)
    except ImportError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise InputError(f"{what} {spec}: {type(e).__name__}: {e}") from None


def run(argv: List[str]) -> int:
    p = argparse.ArgumentParser(prog="spade_trainer", description="One SPADE GRPO round: batch JSONL + checkpoint -> new checkpoint + metrics.")
    p.add_argument("--batch", required=True, help="batch JSONL, one sample per line")
    p.add_argument("--checkpoint", required=True, help="input checkpoint directory, or tiny:SEED")
    p.add_argument("--output", required=True, help="output checkpoint directory (absent or empty)")
    p.add_argument("--config", required=True, help="JSON config file")
    p.add_argument("--metrics", help="metrics JSONL path (default: stdout)")
    args = p.parse_args(argv)

    out_stream = sys.stdout

    def emit(m: dict) -> None:
        out_stream.write(as_json(m) + "\n")
        out_stream.flush()

    try:
        if args.metrics:
            try:
                out_stream = open(args.metrics, "w", encoding="utf-8")
            except OSError as e:
                raise InputError(f"metrics {args.metrics}: {e}") from None
        cfg = load_config(args.config)
        if os.path.exists(args.output) and not os.path.isdir(args.output):
            raise InputError(f"output {args.output}: exists and is not a directory")
        if os.path.isdir(args.output) and os.listdir(args.output):
            raise InputError(f"output {args.output}: directory is not empty")
        samples = load_batch(args.batch)
        torch.manual_seed(cfg.seed)
        device = _device(cfg.device)
        amp = _amp_dtype(cfg.dtype, device)
        policy = _load(args.checkpoint, cfg.backend, "checkpoint")
        enc_stats: dict = {}
        enc = encode_batch(samples, policy.encoder, cfg.max_seq_len, args.batch, cfg.overlong, enc_stats)
        emit({"event": "encode", "samples": len(samples), "kept": len(enc), **enc_stats})
        if not enc:
            raise InputError(f"{args.batch}: every sample is longer than max_seq_len {cfg.max_seq_len} tokens")
        model = policy.model.to(device)
        model.train()
        if cfg.gradient_checkpointing:
            if policy.kind == "builtin":
                model.gradient_checkpointing = True
            else:
                model.gradient_checkpointing_enable()
        params = [q for q in model.parameters() if q.requires_grad]
        opt = make_optimizer(params, cfg, device)
        restored = 0
        if cfg.resume_optimizer and policy.source_dir:
            try:
                restored = ck.restore_optimizer(model, opt, policy.source_dir)
            except (OSError, ValueError, KeyError) as e:
                raise InputError(f"checkpoint {policy.source_dir}: optimizer state: {type(e).__name__}: {e}") from None
        logits_fn = policy.logits
        if cfg.compile and hasattr(torch, "compile"):
            compiled = torch.compile(model)
            logits_fn = lambda ids: (lambda o: o if isinstance(o, torch.Tensor) else o.logits)(compiled(ids))  # noqa: E731
        ref_fn = None
        if cfg.reference_checkpoint and cfg.kl_beta > 0:
            ref = _load(cfg.reference_checkpoint, cfg.backend, "reference_checkpoint")
            ref.model.to(device).eval()
            for q in ref.model.parameters():
                q.requires_grad_(False)
            ref_fn = ref.logits
        pad = getattr(policy.encoder, "pad_id", 0)
        micro = make_micro_batches(enc, cfg.micro_batch_size, pad, device)
        metrics = train_round(logits_fn, params, opt, micro, cfg, device, amp, ref_fn, emit)
        with open(args.batch, "rb") as f:
            batch_sha = hashlib.sha256(f.read()).hexdigest()
        with open(args.config, "rb") as f:
            config_sha = hashlib.sha256(f.read()).hexdigest()
        opt_step = restored + cfg.inner_steps
        files = ck.save_policy(
            policy,
            args.output,
            cfg.save_dtype,
            {"trainer": TRAINER_ID, "batch_sha256": batch_sha, "config_sha256": config_sha, "samples": len(samples)},
            ck.optimizer_tensors(model, opt),
            opt_step,
        )
        emit({"event": "done", "checkpoint_step": policy.parent_step + 1, "files": files, "samples": len(samples), "final_loss": metrics[-1]["loss"]})
        return 0
    except InputError as e:
        print(f"spade_trainer: error: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ImportError, ValueError, RuntimeError, OSError) as e:
        print(f"spade_trainer: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        if out_stream is not sys.stdout:
            out_stream.close()

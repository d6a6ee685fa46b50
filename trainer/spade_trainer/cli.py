"""Command line: one GRPO round from a batch file to a new checkpoint.

    python -m spade_trainer --batch B.jsonl --checkpoint DIR|tiny:SEED \\
        --output OUT_DIR --config CONFIG.json [--metrics METRICS.jsonl]

Metrics are JSON lines (one per inner optimiser step, then a final
{"event": "done", ...} line) written to --metrics, or to stdout when it is
absent. Launched as one process, or by torchrun (one process per GPU, FSDP2;
rank 0 writes the metrics and the servable weights, every rank its shard
of the optimizer state). Exit status: 0 ok, 1 training/runtime failure, 2 bad input or usage.
Errors go to stderr as one line "spade_trainer: error: ...".
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from typing import Callable, List, Optional

import torch

from . import checkpoint as ck
from . import dist as D
from .attention import NAME as ATTN_VARLEN
from .attention import default_implementation as default_attention
from .attention import register as register_attention
from .config import InputError, as_json, load_batch, load_config
from .grpo import encode_batch, loss_scales, make_micro_batches, make_optimizer, train_round

TRAINER_ID = "spade_trainer/2"


def _compute_dtype(name: str, device: torch.device) -> Optional[torch.dtype]:
    """None = float32 (no autocast, no FSDP parameter cast)."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else None
    if name == "float32":
        return None
    return ck.DTYPES[name]


def _load(spec: str, what: str, attn: str) -> ck.Policy:
    """load_policy with a malformed or missing checkpoint (absent files,
    bad JSON, missing or mistyped config keys, corrupt safetensors) turned
    into an InputError naming it."""
    try:
        return ck.load_policy(spec, attn or None)
    except ImportError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise InputError(f"{what} {spec}: {type(e).__name__}: {e}") from None


def _parse_args(argv: List[str]) -> argparse.Namespace:
    """The command line (module doc); a usage error exits 2 (argparse)."""
    p = argparse.ArgumentParser(prog="spade_trainer", description="One SPADE GRPO round: batch JSONL + checkpoint -> new checkpoint + metrics.")
    p.add_argument("--batch", required=True, help="batch JSONL, one sample per line")
    p.add_argument("--checkpoint", required=True, help="input checkpoint directory, or tiny:SEED")
    p.add_argument("--output", required=True, help="output checkpoint directory (absent or empty)")
    p.add_argument("--config", required=True, help="JSON config file")
    p.add_argument("--metrics", help="metrics JSONL path (default: stdout)")
    return p.parse_args(argv)


def _check_output(output: str, lead: bool) -> None:
    """InputError unless output is absent or a directory, and (checked by
    the lead rank only: the others may already be writing their optimizer
    shards) empty."""
    if os.path.exists(output) and not os.path.isdir(output):
        raise InputError(f"output {output}: exists and is not a directory")
    if lead and os.path.isdir(output) and os.listdir(output):
        raise InputError(f"output {output}: directory is not empty")


def _prepare_model(policy: ck.Policy, cfg, device: torch.device, dtype: Optional[torch.dtype]):
    """Put the policy's model in training mode on device (activation
    checkpointing with cfg.gradient_checkpointing; sharded with FSDP2 in
    dtype under torchrun), make its AdamW and load the optimizer state
    saved with the input checkpoint when cfg.resume_optimizer. Returns
    (model, trainable parameters, optimizer, the restored optimizer step
    or 0, sharded). A state that does not load is an InputError."""
    model = policy.model
    model.config.use_cache = False
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    sharded = D.world() > 1
    if sharded:
        model.to(device)
        D.shard(model, dtype, cfg.offload)
    else:
        model.to(device)
    model.train()
    params = [q for q in model.parameters() if q.requires_grad]
    opt = make_optimizer(params, cfg, device)
    restored = 0
    state_dir = os.path.join(policy.source_dir, ck.OPTIMIZER_DIR) if policy.source_dir else ""
    if cfg.resume_optimizer and state_dir and os.path.isdir(state_dir):
        try:
            D.load_train_state(model, opt, state_dir)
        except (OSError, ValueError, KeyError, RuntimeError) as e:
            raise InputError(f"checkpoint {policy.source_dir}: optimizer state {state_dir}: {type(e).__name__}: {e}") from None
        restored = policy.optimizer_step
    return model, params, opt, restored, sharded


def _reference_logits(cfg, policy: ck.Policy, checkpoint: str, attn: str, device: torch.device):
    """The KL reference's logits function over a micro-batch, or None
    when there is no separate reference (kl_beta 0 or no
    reference_checkpoint: the input policy is the reference). A reference
    whose tokenizer is not the checkpoint's is an InputError naming
    both."""
    if not (cfg.reference_checkpoint and cfg.kl_beta > 0):
        return None
    ref = _load(cfg.reference_checkpoint, "reference_checkpoint", attn)
    if not ck.same_tokenizer(ref, policy):
        # KL compares the two models' log-probs of the same ids.
        raise InputError(
            f"reference_checkpoint {cfg.reference_checkpoint}: its tokenizer or vocabulary is not the checkpoint "
            f"{checkpoint}'s (vocab_size {getattr(ref.model.config, 'vocab_size', None)} vs {getattr(policy.model.config, 'vocab_size', None)}); "
            "KL needs a reference over the same token ids"
        )
    ref.model.to(device).eval()
    for q in ref.model.parameters():
        q.requires_grad_(False)
    return lambda mb: ck.model_logits(ref.model, mb.ids, mb.position_ids, mb.cu_seq_lens, mb.max_len, mb.keep)


def _sha256_file(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _train(args: argparse.Namespace, lead: bool, emit: Callable[[dict], None]) -> None:
    """One round: load the config, batch and checkpoint, encode and pack
    the batch, run train_round and write the new checkpoint (rank 0 the
    servable weights and metadata, every rank its optimizer shard), then
    emit the "done" line. Raises InputError on bad input."""
    cfg = load_config(args.config)
    _check_output(args.output, lead)
    samples = load_batch(args.batch)
    try:
        device = D.setup(cfg.device)
    except ValueError as e:
        raise InputError(str(e)) from None
    torch.manual_seed(cfg.seed)
    dtype = _compute_dtype(cfg.dtype, device)
    attn = cfg.attn_implementation or default_attention(device)
    if attn == ATTN_VARLEN:
        register_attention()
    policy = _load(args.checkpoint, "checkpoint", attn)
    enc_stats: dict = {}
    vocab = getattr(policy.model.config, "vocab_size", None)
    enc = encode_batch(samples, policy.encoder, cfg.max_seq_len, args.batch, cfg.overlong, enc_stats, vocab, cfg.train_reasoning,
                       cfg.agent_samples)
    emit({"event": "encode", "samples": len(samples), "kept": len(samples) - enc_stats["dropped_samples"], **enc_stats})
    if not enc:
        raise InputError(f"{args.batch}: every sample is longer than max_seq_len {cfg.max_seq_len} tokens")
    loss_scales(enc, cfg.loss_aggregation)
    model, params, opt, restored, sharded = _prepare_model(policy, cfg, device, dtype)
    fwd = model
    if cfg.compile:
        fwd = torch.compile(model)
    # Under FSDP the parameters are already in the compute dtype.
    amp = None if sharded else dtype

    def logits_fn(mb):
        return ck.model_logits(fwd, mb.ids, mb.position_ids, mb.cu_seq_lens, mb.max_len, mb.keep)

    ref_fn = _reference_logits(cfg, policy, args.checkpoint, attn, device)
    micro = make_micro_batches(enc, cfg.max_tokens_per_micro_batch, device, cfg.micro_batch_size)
    def warn(line: str) -> None:
        if lead:
            print(line, file=sys.stderr, flush=True)

    metrics = train_round(logits_fn, params, opt, micro, cfg, device, amp, ref_fn, emit, warn)
    batch_sha = _sha256_file(args.batch)
    config_sha = _sha256_file(args.config)
    opt_step = restored + cfg.inner_steps
    full = D.full_state_dict(model)
    if lead:
        ck.save_weights(policy, full, args.output, cfg.save_dtype)
    if cfg.save_optimizer:
        D.save_train_state(model, opt, os.path.join(args.output, ck.OPTIMIZER_DIR))
    if sharded:
        torch.distributed.barrier()
    if lead:
        ck.write_meta(
            policy,
            args.output,
            {"trainer": TRAINER_ID, "batch_sha256": batch_sha, "config_sha256": config_sha, "samples": len(samples), "world_size": D.world()},
            opt_step if cfg.save_optimizer else 0,
        )
    emit({"event": "done", "checkpoint_step": policy.parent_step + 1, "files": ck.files_of(args.output) if lead else [], "samples": len(samples), "final_loss": metrics[-1]["loss"], "world_size": D.world()})


def run(argv: List[str]) -> int:
    """The command: parse argv, run one round (_train) and return the exit
    status (module doc), printing an error as one stderr line."""
    args = _parse_args(argv)
    lead = int(os.environ.get("RANK", "0")) == 0
    out_stream = sys.stdout

    def emit(m: dict) -> None:
        if lead:
            out_stream.write(as_json(m) + "\n")
            out_stream.flush()

    try:
        if args.metrics and lead:
            try:
                out_stream = open(args.metrics, "w", encoding="utf-8")
            except OSError as e:
                raise InputError(f"metrics {args.metrics}: {e}") from None
        _train(args, lead, emit)
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
        D.teardown()

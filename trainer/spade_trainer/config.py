"""The trainer's JSON config file (``--config``) and the batch JSONL file
(``--batch``): parsing with errors that name the file, line and field."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, List, Optional


class InputError(ValueError):
    """Bad input (config or batch); the CLI exits with status 2."""


# Largest finite float32: advantages and weights become float32 tensors, so
# a larger value would silently turn into inf and then NaN in the loss.
FLOAT32_MAX = 3.4028234663852886e38

# torch.manual_seed's accepted range.
SEED_MIN, SEED_MAX = -(1 << 63), (1 << 64) - 1


def _no_duplicate_keys(pairs):
    """json object_pairs_hook: a key given twice is an error (json.loads
    would silently keep the last value)."""
    out = {}
    for k, v in pairs:
        if k in out:
            raise InputError(f"duplicate key {k!r}")
        out[k] = v
    return out


@dataclasses.dataclass
class TrainConfig:
    """Training hyper-parameters; JSON keys are the field names.

    lr: AdamW learning rate. clip_epsilon: PPO/GRPO ratio clip below 1
    (and above 1 unless clip_epsilon_high > 0: DAPO's asymmetric
    clip-higher, 0.28 in SPADE's public code). kl_beta: weight of the k3
    KL(policy || reference) term (0 disables it). grad_clip: max global
    grad L2 norm (0 disables clipping, the norm is still reported).
    inner_steps: optimiser steps on the same batch (ratios are against the
    pre-round policy). max_tokens_per_micro_batch: samples are packed with
    no padding into micro-batches of at most this many tokens (a longer
    sample gets one of its own); micro_batch_size caps the samples per
    micro-batch; gradients accumulate over the batch. seed: torch seed.
    dtype: compute dtype "auto" (bf16 on CUDA, fp32 on CPU), "float32",
    "bfloat16", "float16": autocast with one process, FSDP2's parameter
    dtype under torchrun; master weights, gradient reduction and AdamW
    state stay float32. device: "auto" (cuda if available), "cpu", "cuda",
    "cuda:N" (under torchrun on CUDA each rank takes cuda:LOCAL_RANK).
    weight_decay: AdamW decoupled decay; 0 by default so a zero-advantage
    batch has a zero gradient (a fresh AdamW then leaves the weights
    unchanged; resumed moments still move them by their momentum).
    max_seq_len: the longest sample in tokens; overlong: what happens to a
    longer one: "truncate_left" (keep its last max_seq_len tokens if any
    trained token remains, else drop it; counted in the "encode" event),
    "drop", or "error". save_dtype: dtype of the servable weights
    (the fp32 master weights go with the optimizer state).
    reference_checkpoint: KL reference ("" = the input checkpoint, whose
    log-probs equal the pre-step policy's, so no extra forward is needed).
    attn_implementation: transformers' attention ("" = flash_attention_2 on
    CUDA when flash_attn imports, else varlen_sdpa: SDPA per packed sample,
    attention.py; or any of transformers' own: sdpa, eager, ...). gradient_checkpointing: activation
    checkpointing of every decoder layer. offload: FSDP2 CPU offload of
    parameters, gradients and optimizer state (torchrun only). compile:
    torch.compile of the model. resume_optimizer: load the fp32 master
    weights and AdamW state saved with an input checkpoint (optimizer/).
    save_optimizer: write them with the new checkpoint.
    """

    lr: float = 1e-6
    clip_epsilon: float = 0.2
    clip_epsilon_high: float = 0.0
    kl_beta: float = 0.0
    grad_clip: float = 1.0
    inner_steps: int = 1
    micro_batch_size: int = 1024
    max_tokens_per_micro_batch: int = 16384
    seed: int = 0
    dtype: str = "auto"
    device: str = "auto"
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    max_seq_len: int = 8192
    overlong: str = "truncate_left"
    save_dtype: str = "bfloat16"
    reference_checkpoint: str = ""
    attn_implementation: str = ""
    gradient_checkpointing: bool = False
    offload: bool = False
    compile: bool = False
    resume_optimizer: bool = True
    save_optimizer: bool = True

    def validate(self, where: str) -> None:
        def bad(field: str, why: str) -> InputError:
            return InputError(f"{where}: field {field}: {why}")

        for f in ("lr", "clip_epsilon", "clip_epsilon_high", "kl_beta", "grad_clip", "weight_decay", "adam_eps"):
            v = getattr(self, f)
            if not math.isfinite(v) or v < 0:
                raise bad(f, f"{v!r} must be a finite number >= 0")
        if not (0 <= self.adam_beta1 < 1 and 0 <= self.adam_beta2 < 1):
            raise bad("adam_beta1/adam_beta2", "must be in [0, 1)")
        for f in ("inner_steps", "micro_batch_size", "max_tokens_per_micro_batch", "max_seq_len"):
            if getattr(self, f) < 1:
                raise bad(f, f"{getattr(self, f)!r} must be >= 1")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise bad("dtype", f"{self.dtype!r}: want auto, float32, bfloat16 or float16")
        if self.save_dtype not in ("float32", "bfloat16", "float16"):
            raise bad("save_dtype", f"{self.save_dtype!r}: want float32, bfloat16 or float16")
        if self.attn_implementation not in ("", "varlen_sdpa", "sdpa", "eager", "flash_attention_2", "flash_attention_3", "flex_attention"):
            raise bad("attn_implementation", f"{self.attn_implementation!r}: want \"\" (the trainer's default), varlen_sdpa, sdpa, eager, flash_attention_2, flash_attention_3 or flex_attention")
        if not (self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:")):
            raise bad("device", f"{self.device!r}: want auto, cpu, cuda or cuda:N")
        if self.overlong not in ("error", "truncate_left", "drop"):
            raise bad("overlong", f"{self.overlong!r}: want truncate_left, drop or error")
        if not SEED_MIN <= self.seed <= SEED_MAX:
            raise bad("seed", f"{self.seed!r} is outside [-2^63, 2^64-1]")


def load_config(path: str) -> TrainConfig:
    """Parse a JSON config; unknown keys and wrong types are errors naming
    the key (a typo like "klbeta" must not silently train without KL)."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f, object_pairs_hook=_no_duplicate_keys)
    except (OSError, ValueError) as e:  # ValueError: JSON, UTF-8, duplicate key
        raise InputError(f"config {path}: {e}") from None
    if not isinstance(raw, dict):
        raise InputError(f"config {path}: want a JSON object")
    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    kw = {}
    for k, v in raw.items():
        if k not in fields:
            raise InputError(f"config {path}: unknown field {k!r}")
        want = fields[k].type
        ok = {
            "float": isinstance(v, (int, float)) and not isinstance(v, bool),
            "int": isinstance(v, int) and not isinstance(v, bool),
            "str": isinstance(v, str),
            "bool": isinstance(v, bool),
        }[want]
        if not ok:
            raise InputError(f"config {path}: field {k}: {v!r} is not a {want}")
        if want == "float":
            try:
                v = float(v)
            except OverflowError:
                raise InputError(f"config {path}: field {k}: integer too large for a float") from None
        kw[k] = v
    cfg = TrainConfig(**kw)
    cfg.validate(f"config {path}")
    return cfg


@dataclasses.dataclass
class Sample:
    """One train_batch row: see docs/training.md "Batch file"."""

    sample_id: str
    role: str
    group: str
    messages: List[dict]
    reward: float
    advantage: float
    weight: float
    line: int = 0

    def trained_messages(self) -> List[int]:
        """Indices of the role's own tokens: every assistant turn of an
        agent play; only the final assistant message (the response being
        rewarded) of a designer sample."""
        idx = [i for i, m in enumerate(self.messages) if m["role"] == "assistant"]
        if self.role == "designer":
            return idx[-1:]
        return idx


def _num(obj: dict, key: str, where: str) -> float:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(f"{where}: field {key}: want a number, got {v!r}")
    try:
        v = float(v)
    except OverflowError:  # an integer literal beyond float64
        raise InputError(f"{where}: field {key}: integer too large for a float") from None
    if not math.isfinite(v):
        raise InputError(f"{where}: field {key}: {v!r} is not finite")
    return v


def parse_sample(line: str, where: str) -> Sample:
    """Parse one batch JSONL line; ``where`` is "file:line" for errors."""
    try:
        obj = json.loads(line, object_pairs_hook=_no_duplicate_keys)
    except InputError as e:
        raise InputError(f"{where}: {e}") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{where}: not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise InputError(f"{where}: want a JSON object")
    extra = set(obj) - {"sample_id", "role", "group", "messages", "reward", "advantage", "weight"}
    if extra:
        raise InputError(f"{where}: unknown field {sorted(extra)[0]!r}")
    for key in ("sample_id", "group"):
        if not isinstance(obj.get(key), str) or not obj[key]:
            raise InputError(f"{where}: field {key}: want a non-empty string")
    role = obj.get("role")
    if role not in ("agent", "designer"):
        raise InputError(f"{where}: field role: {role!r}: want \"agent\" or \"designer\"")
    msgs = obj.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise InputError(f"{where}: field messages: want a non-empty list")
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or set(m) != {"role", "content"} or not isinstance(m["role"], str) or not isinstance(m["content"], str):
            raise InputError(f"{where}: field messages[{i}]: want {{\"role\": string, \"content\": string}}")
        if m["role"] not in ("system", "user", "assistant", "tool"):
            raise InputError(f"{where}: field messages[{i}].role: {m['role']!r}: want system, user, assistant or tool")
        try:
            m["content"].encode("utf-8")
        except UnicodeEncodeError as e:  # a lone surrogate from a \uD800 escape
            raise InputError(f"{where}: field messages[{i}].content: not valid Unicode ({e.reason} at character {e.start})") from None
    weight = _num(obj, "weight", where)
    if weight < 0:
        raise InputError(f"{where}: field weight: {weight} must be >= 0")
    advantage = _num(obj, "advantage", where)
    for key, v in (("advantage", advantage), ("weight", weight), ("advantage x weight", advantage * weight)):
        if abs(v) > FLOAT32_MAX:
            raise InputError(f"{where}: field {key}: {v!r} overflows float32 (the trainer's loss dtype)")
    s = Sample(
        sample_id=obj["sample_id"],
        role=role,
        group=obj["group"],
        messages=msgs,
        reward=_num(obj, "reward", where),
        advantage=advantage,
        weight=weight,
    )
    if not s.trained_messages():
        raise InputError(f"{where}: field messages: no assistant message to train on")
    return s


def load_batch(path: str, limit: Optional[int] = None) -> List[Sample]:
    """Read the batch JSONL (blank lines skipped); sample ids must be
    unique. Errors name file:line and the field."""
    out: List[Sample] = []
    seen: dict[str, int] = {}
    try:
        f = open(path, "rb")
    except OSError as e:
        raise InputError(f"batch {path}: {e}") from None
    with f:
        # Bytes split on "\n" only, so a stray "\r" (JSON whitespace) does
        # not split a row and line numbers match the file's; each line is
        # decoded on its own so a UTF-8 error names its line.
        for n, raw in enumerate(f, 1):
            where = f"{path}:{n}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"{where}: not UTF-8: byte {raw[e.start]:#04x} at offset {e.start}") from None
            if not line.strip():
                continue
            s = parse_sample(line, where)
            if s.sample_id in seen:
                raise InputError(f"{where}: field sample_id: {s.sample_id!r} duplicates line {seen[s.sample_id]}")
            seen[s.sample_id] = n
            s.line = n
            out.append(s)
    if not out:
        raise InputError(f"batch {path}: no samples")
    return out


def as_json(obj: Any) -> str:
    """Compact JSON that refuses NaN/Inf (never valid JSON for the reader)."""
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, allow_nan=False)

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

# The values of loss_aggregation (grpo.loss_scales).
LOSS_AGGREGATIONS = ("token_mean", "sample_mean")

# The values of train_reasoning (grpo.encode_batch).
TRAIN_REASONING = ("generated", "none")

# The values of agent_samples (grpo.encode_batch).
AGENT_SAMPLES = ("play", "turn")

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

    The fields are the Go side's grpo.TrainerConfig (stages/grpo), which
    defines the contract and fills every key: they have no default values
    here, and load_config refuses a missing or an unknown key. Code that
    builds a TrainConfig itself (tests, benchmarks) passes every field.

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
    weight_decay: AdamW decoupled decay; with 0 (the grpo default) a
    zero-advantage batch has a zero gradient (a fresh AdamW then leaves the weights
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
    mismatch_warn: a warning line goes to stderr when the mean
    |logp_trainer - logp_sampler| over the tokens with a sampler log-prob
    exceeds it (nats; docs/training.md "Training on the sampled tokens").
    tis_cap: truncated importance sampling of the policy-gradient term,
    w_t = min(exp(logp_old_t - logp_sampler_t), tis_cap) (0 = off; grpo.py).
    loss_aggregation: "token_mean" (one mean over every trained token of
    the batch; verl's token-mean) or "sample_mean" (each sample's trained
    tokens averaged, then the samples; verl's seq-mean-token-mean, slime's
    default; grpo.loss_scales). train_reasoning: "generated" (a trained
    turn's <think> block is trained) or "none" (no token of it is: the
    tokens through the first </think> and the whitespace after it stay in
    the context untrained; grpo.encode_batch). agent_samples: "play" (an
    agent row is one sample, every assistant turn trained) or "turn"
    (each assistant turn of an agent row is a sample of its own:
    messages[:i+1] with turn i trained, in the context it was sampled in,
    with the row's advantage and weight; grpo.encode_batch).
    """

    lr: float
    clip_epsilon: float
    clip_epsilon_high: float
    kl_beta: float
    grad_clip: float
    inner_steps: int
    micro_batch_size: int
    max_tokens_per_micro_batch: int
    seed: int
    dtype: str
    device: str
    weight_decay: float
    adam_beta1: float
    adam_beta2: float
    adam_eps: float
    max_seq_len: int
    overlong: str
    save_dtype: str
    reference_checkpoint: str
    attn_implementation: str
    gradient_checkpointing: bool
    offload: bool
    compile: bool
    resume_optimizer: bool
    save_optimizer: bool
    tis_cap: float
    mismatch_warn: float
    loss_aggregation: str
    train_reasoning: str
    agent_samples: str

    def validate(self, where: str) -> None:
        def bad(field: str, why: str) -> InputError:
            return InputError(f"{where}: field {field}: {why}")

        for f in ("lr", "clip_epsilon", "clip_epsilon_high", "kl_beta", "grad_clip", "weight_decay", "adam_eps", "mismatch_warn", "tis_cap"):
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
        if self.loss_aggregation not in LOSS_AGGREGATIONS:
            raise bad("loss_aggregation", f"{self.loss_aggregation!r}: want {' or '.join(LOSS_AGGREGATIONS)}")
        if self.train_reasoning not in TRAIN_REASONING:
            raise bad("train_reasoning", f"{self.train_reasoning!r}: want {' or '.join(TRAIN_REASONING)}")
        if self.agent_samples not in AGENT_SAMPLES:
            raise bad("agent_samples", f"{self.agent_samples!r}: want {' or '.join(AGENT_SAMPLES)}")
        if not SEED_MIN <= self.seed <= SEED_MAX:
            raise bad("seed", f"{self.seed!r} is outside [-2^63, 2^64-1]")


def load_config(path: str) -> TrainConfig:
    """Parse a JSON config: every TrainConfig field must be given, exactly
    once and with its type; a missing key, an unknown key and a wrong type
    are InputErrors naming the key (a typo like "klbeta" must not silently
    train without KL, and nothing is defaulted on this side: the Go side
    writes every key, docs/training.md "Config file")."""
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
    missing = [f for f in fields if f not in kw]
    if missing:
        raise InputError(f"config {path}: missing field{'s' if len(missing) > 1 else ''} {', '.join(repr(f) for f in missing)}")
    cfg = TrainConfig(**kw)
    cfg.validate(f"config {path}")
    return cfg


@dataclasses.dataclass
class Sample:
    """One train_batch row: see docs/training.md "Batch file". ``tools``
    is the row's OpenAI tool declarations (None when it has none); a
    message may carry tool_calls / tool_call_id and, on assistant turns,
    the server's completion_token_ids, completion_logprobs and
    prompt_token_ids (validated by parse_sample)."""

    sample_id: str
    role: str
    group: str
    messages: List[dict]
    reward: float
    advantage: float
    weight: float
    line: int = 0
    tools: Optional[List[dict]] = None

    def trained_messages(self) -> List[int]:
        """Indices of the role's own tokens: every assistant turn of an
        agent play; only the final assistant message (the response being
        rewarded) of a designer sample."""
        idx = [i for i, m in enumerate(self.messages) if m["role"] == "assistant"]
        if self.role == "designer":
            return idx[-1:]
        return idx

    def has_token_ids(self) -> bool:
        """Every trained turn carries the ids the server sampled: the
        sample is built from ids (docs/training.md "Training on the
        sampled tokens"), else from text."""
        return all("completion_token_ids" in self.messages[i] for i in self.trained_messages())


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


# Token ids fit int64 tensors; the checkpoint's vocabulary bounds them
# further when the sample is encoded (grpo.encode_batch).
_MAX_ID = (1 << 63) - 1


def _check_text(v: str, where: str, field: str) -> None:
    try:
        v.encode("utf-8")
    except UnicodeEncodeError as e:  # a lone surrogate from a \uD800 escape
        raise InputError(f"{where}: field {field}: not valid Unicode ({e.reason} at character {e.start})") from None


def _check_ids(v: Any, where: str, field: str, nonempty: bool) -> None:
    if not isinstance(v, list) or (nonempty and not v):
        raise InputError(f"{where}: field {field}: want a {'non-empty ' if nonempty else ''}list of token ids")
    for k, t in enumerate(v):
        if isinstance(t, bool) or not isinstance(t, int) or not 0 <= t <= _MAX_ID:
            raise InputError(f"{where}: field {field}[{k}]: {t!r} is not a token id (an integer >= 0)")


def _check_logprobs(v: Any, where: str, field: str) -> None:
    if not isinstance(v, list):
        raise InputError(f"{where}: field {field}: want a list of numbers")
    for k, x in enumerate(v):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(float(x)) or x > 1e-3:
            raise InputError(f"{where}: field {field}[{k}]: {x!r} is not a log-probability (a finite number <= 0)")


def _check_tools(tools: Any, where: str) -> None:
    """OpenAI tool declarations: [{"type": "function", "function": {"name",
    "description", "parameters": {JSON schema}}}] ("description",
    "parameters" and "strict" optional)."""
    if not isinstance(tools, list):
        raise InputError(f"{where}: field tools: want a list of tool declarations")
    for k, t in enumerate(tools):
        f = f"tools[{k}]"
        if not isinstance(t, dict) or set(t) != {"type", "function"} or t["type"] != "function":
            raise InputError(f"{where}: field {f}: want {{\"type\": \"function\", \"function\": {{...}}}}")
        fn = t["function"]
        if not isinstance(fn, dict):
            raise InputError(f"{where}: field {f}.function: want an object")
        extra = set(fn) - {"name", "description", "parameters", "strict"}
        if extra:
            raise InputError(f"{where}: field {f}.function: unknown field {sorted(extra)[0]!r}")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise InputError(f"{where}: field {f}.function.name: want a non-empty string")
        if "description" in fn and not isinstance(fn["description"], str):
            raise InputError(f"{where}: field {f}.function.description: want a string")
        if "parameters" in fn and not isinstance(fn["parameters"], dict):
            raise InputError(f"{where}: field {f}.function.parameters: want a JSON schema object")
        if "strict" in fn and not isinstance(fn["strict"], bool):
            raise InputError(f"{where}: field {f}.function.strict: want a boolean")
        _check_text(json.dumps(fn, ensure_ascii=False), where, f)


def _check_tool_calls(calls: Any, where: str, field: str) -> None:
    if not isinstance(calls, list) or not calls:
        raise InputError(f"{where}: field {field}: want a non-empty list of tool calls")
    for k, c in enumerate(calls):
        f = f"{field}[{k}]"
        if not isinstance(c, dict) or set(c) != {"id", "type", "function"} or c["type"] != "function" or not isinstance(c["id"], str):
            raise InputError(f"{where}: field {f}: want {{\"id\": string, \"type\": \"function\", \"function\": {{\"name\", \"arguments\"}}}}")
        fn = c["function"]
        if not isinstance(fn, dict) or set(fn) != {"name", "arguments"} or not isinstance(fn["name"], str) or not fn["name"] or not isinstance(fn["arguments"], str):
            raise InputError(f"{where}: field {f}.function: want {{\"name\": non-empty string, \"arguments\": string (JSON text)}}")
        for key in ("id",):
            _check_text(c[key], where, f"{f}.{key}")
        _check_text(fn["name"], where, f"{f}.function.name")
        _check_text(fn["arguments"], where, f"{f}.function.arguments")


# Message keys beyond role and content, and the roles that may carry them.
_MESSAGE_KEYS = {
    "tool_calls": ("assistant",),
    "tool_call_id": ("tool",),
    "completion_token_ids": ("assistant",),
    "completion_logprobs": ("assistant",),
    "prompt_token_ids": ("assistant",),
}


def _check_message(m: Any, where: str, i: int) -> None:
    f = f"messages[{i}]"
    if not isinstance(m, dict) or not {"role", "content"} <= set(m) or not isinstance(m["role"], str) or not isinstance(m["content"], str):
        raise InputError(f"{where}: field {f}: want {{\"role\": string, \"content\": string}}")
    if m["role"] not in ("system", "user", "assistant", "tool"):
        raise InputError(f"{where}: field {f}.role: {m['role']!r}: want system, user, assistant or tool")
    for k in sorted(set(m) - {"role", "content"}):
        if k not in _MESSAGE_KEYS:
            raise InputError(f"{where}: field {f}: unknown field {k!r}")
        if m["role"] not in _MESSAGE_KEYS[k]:
            raise InputError(f"{where}: field {f}.{k}: only on {' or '.join(_MESSAGE_KEYS[k])} messages, not {m['role']}")
    _check_text(m["content"], where, f"{f}.content")
    if "tool_calls" in m:
        _check_tool_calls(m["tool_calls"], where, f"{f}.tool_calls")
    if "tool_call_id" in m:
        if not isinstance(m["tool_call_id"], str):
            raise InputError(f"{where}: field {f}.tool_call_id: want a string")
        _check_text(m["tool_call_id"], where, f"{f}.tool_call_id")
    if "completion_token_ids" in m:
        _check_ids(m["completion_token_ids"], where, f"{f}.completion_token_ids", True)
    if "prompt_token_ids" in m:
        _check_ids(m["prompt_token_ids"], where, f"{f}.prompt_token_ids", True)
    if "completion_logprobs" in m:
        _check_logprobs(m["completion_logprobs"], where, f"{f}.completion_logprobs")


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
    extra = set(obj) - {"sample_id", "role", "group", "messages", "reward", "advantage", "weight", "tools"}
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
        _check_message(m, where, i)
    tools = obj.get("tools")
    if "tools" in obj:
        _check_tools(tools, where)
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
        tools=tools or None,
    )
    if not s.trained_messages():
        raise InputError(f"{where}: field messages: no assistant message to train on")
    if s.trained_messages()[0] == 0:
        # A chat template renders no prompt for an empty conversation, so
        # the turn's tokens cannot be located (and nothing sampled it).
        raise InputError(f"{where}: field messages[0].role: a trained assistant message needs a message before it (the prompt it answers)")
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

"""Loading and saving policies as Hugging Face-format checkpoints.

A checkpoint directory holds ``config.json`` (Qwen3 keys),
``model.safetensors`` (or shards + ``model.safetensors.index.json`` when it
comes from the Hub), tokenizer files, and, when written by this trainer,
``optimizer.safetensors`` (AdamW moments, so the next round resumes the
optimiser instead of restarting it) and ``spade_checkpoint.json`` (lineage;
written last, so its presence marks a complete checkpoint).

``tiny:SEED`` names the built-in tiny model initialised from SEED.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from typing import Dict, List, Optional

import torch

from . import safetensors_io as st
from .model import Qwen3Config, Qwen3ForCausalLM, tiny_config
from .tokenizer import SPADE_TOKENIZER_FILE, ByteTokenizer, HFChatEncoder

CHECKPOINT_META = "spade_checkpoint.json"
OPTIMIZER_FILE = "optimizer.safetensors"
FORMAT_VERSION = 1
TINY_VOCAB = 320  # byte tokenizer's 259 ids padded to a multiple of 64

# Files copied verbatim from a Hugging Face checkpoint's tokenizer.
HF_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "generation_config.json",
)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def have_transformers() -> bool:
    """True when transformers is importable (GPU images; not needed here)."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


@dataclasses.dataclass
class Policy:
    """A loaded model with its chat encoder and lineage."""

    model: torch.nn.Module
    encoder: object  # ByteTokenizer or HFChatEncoder
    kind: str  # "builtin" or "transformers"
    source: str  # the checkpoint argument as given
    source_dir: Optional[str]  # None for tiny:SEED
    parent_step: int

    def logits(self, input_ids: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids)
        return out if isinstance(out, torch.Tensor) else out.logits


def parse_tiny(spec: str) -> Optional[int]:
    """Seed of a ``tiny:SEED`` spec, or None when spec is a directory."""
    if not spec.startswith("tiny:"):
        return None
    s = spec[len("tiny:") :]
    if not s.isdigit():
        raise ValueError(f"checkpoint {spec!r}: want tiny:SEED with SEED a non-negative integer")
    return int(s)


def new_tiny(seed: int) -> Qwen3ForCausalLM:
    """The tiny Qwen3 model, weights drawn from a generator seeded ``seed``."""
    tok = ByteTokenizer()
    cfg = tiny_config(TINY_VOCAB)
    cfg.eos_token_id = tok.eos_id
    model = Qwen3ForCausalLM(cfg)
    g = torch.Generator().manual_seed(seed)
    model.init_weights(g)
    return model


def read_weights(ckpt_dir: str) -> Dict[str, torch.Tensor]:
    """All tensors of a checkpoint, single-file or sharded."""
    single = os.path.join(ckpt_dir, "model.safetensors")
    if os.path.exists(single):
        return st.load_file(single)
    index = os.path.join(ckpt_dir, "model.safetensors.index.json")
    if not os.path.exists(index):
        raise FileNotFoundError(f"checkpoint {ckpt_dir}: no model.safetensors or model.safetensors.index.json")
    with open(index, encoding="utf-8") as f:
        weight_map = json.load(f)["weight_map"]
    out: Dict[str, torch.Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        if os.path.basename(shard) != shard:
            raise ValueError(f"{index}: shard name {shard!r} must be a plain file name")
        out.update(st.load_file(os.path.join(ckpt_dir, shard)))
    return out


def load_policy(spec: str, backend: str = "auto") -> Policy:
    """Load ``tiny:SEED`` or a checkpoint directory on CPU, float32.

    Backend "auto" uses the built-in Qwen3 for model_type qwen3 and
    transformers otherwise; the tokenizer is the byte tokenizer when the
    checkpoint has spade_tokenizer.json, else the transformers one.
    Raises ValueError / FileNotFoundError / ImportError with the path.
    """
    seed = parse_tiny(spec)
    if seed is not None:
        return Policy(new_tiny(seed), ByteTokenizer(), "builtin", spec, None, 0)
    if not os.path.isdir(spec):
        raise FileNotFoundError(f"checkpoint {spec!r}: not a directory and not tiny:SEED")
    with open(os.path.join(spec, "config.json"), encoding="utf-8") as f:
        hf_cfg = json.load(f)
    parent_step = 0
    meta_path = os.path.join(spec, CHECKPOINT_META)
    if os.path.exists(meta_path):
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
        if meta.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"{meta_path}: format_version {meta.get('format_version')!r}, this trainer reads {FORMAT_VERSION}")
        parent_step = int(meta["step"])
    if os.path.exists(os.path.join(spec, SPADE_TOKENIZER_FILE)):
        encoder: object = ByteTokenizer.load(spec)
    else:
        if not have_transformers():
            raise ImportError(f"checkpoint {spec}: has a Hugging Face tokenizer; install transformers to train it")
        from transformers import AutoTokenizer

        encoder = HFChatEncoder(AutoTokenizer.from_pretrained(spec))
    use_builtin = backend == "builtin" or (backend == "auto" and hf_cfg.get("model_type") == "qwen3")
    if use_builtin:
        model = Qwen3ForCausalLM(Qwen3Config.from_hf_dict(hf_cfg))
        model.load_hf_state_dict(read_weights(spec))
        return Policy(model, encoder, "builtin", spec, spec, parent_step)
    if not have_transformers():
        raise ImportError(f"checkpoint {spec}: model_type {hf_cfg.get('model_type')!r} needs transformers")
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(spec, torch_dtype=torch.float32)
    return Policy(model, encoder, "transformers", spec, spec, parent_step)


def _write_json(path: str, obj: object) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")


def save_policy(
    policy: Policy,
    out_dir: str,
    save_dtype: str,
    lineage: Dict[str, object],
    optimizer_state: Optional[Dict[str, torch.Tensor]] = None,
    optimizer_step: int = 0,
) -> List[str]:
    """Write the checkpoint into ``out_dir`` (created; must be empty).

    Weights are cast to ``save_dtype``. ``lineage`` goes into
    spade_checkpoint.json with format_version and step = parent_step + 1;
    that file is written last. Returns the file names written, sorted.
    """
    os.makedirs(out_dir, exist_ok=True)
    dtype = DTYPES[save_dtype]
    step = policy.parent_step + 1
    if policy.kind == "builtin":
        model: Qwen3ForCausalLM = policy.model  # type: ignore[assignment]
        sd = {k: v.detach().to("cpu", dtype) for k, v in model.hf_state_dict().items()}
        st.save_file(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
        _write_json(os.path.join(out_dir, "config.json"), model.config.to_hf_dict(save_dtype))
    else:
        policy.model.to(dtype).save_pretrained(out_dir, safe_serialization=True)
        policy.model.float()
    if isinstance(policy.encoder, ByteTokenizer):
        policy.encoder.save(out_dir, model_max_length=8192)
        eos = policy.encoder.eos_id
        _write_json(
            os.path.join(out_dir, "generation_config.json"),
            {"eos_token_id": eos, "pad_token_id": policy.encoder.pad_id, "transformers_version": "4.51.0"},
        )
    elif policy.source_dir:
        for name in HF_TOKENIZER_FILES:
            src = os.path.join(policy.source_dir, name)
            if os.path.exists(src) and not os.path.exists(os.path.join(out_dir, name)):
                shutil.copyfile(src, os.path.join(out_dir, name))
    if optimizer_state is not None:
        st.save_file(
            optimizer_state,
            os.path.join(out_dir, OPTIMIZER_FILE),
            metadata={"format": "pt", "spade": "adamw-v1", "step": str(optimizer_step)},
        )
    meta = dict(lineage)
    meta.update({"format_version": FORMAT_VERSION, "step": step, "parent": policy.source, "parent_step": policy.parent_step})
    _write_json(os.path.join(out_dir, CHECKPOINT_META), meta)
    return sorted(os.listdir(out_dir))


def optimizer_tensors(model: torch.nn.Module, opt: torch.optim.Optimizer) -> Dict[str, torch.Tensor]:
    """AdamW first/second moments keyed ``exp_avg/<param>`` and
    ``exp_avg_sq/<param>`` (float32, CPU), for optimizer.safetensors."""
    out: Dict[str, torch.Tensor] = {}
    for name, p in model.named_parameters():
        s = opt.state.get(p)
        if not s:
            continue
        out["exp_avg/" + name] = s["exp_avg"].detach().float().cpu()
        out["exp_avg_sq/" + name] = s["exp_avg_sq"].detach().float().cpu()
    return out


def restore_optimizer(model: torch.nn.Module, opt: torch.optim.Optimizer, ckpt_dir: str) -> int:
    """Load optimizer.safetensors from ``ckpt_dir`` into ``opt`` if present.

    Returns the restored AdamW step count (0 when there is no file). Uses
    ``load_state_dict`` so torch places the state as its optimiser variant
    (fused, foreach) expects.
    """
    path = os.path.join(ckpt_dir, OPTIMIZER_FILE)
    if not os.path.exists(path):
        return 0
    meta = st.read_metadata(path)
    if meta.get("spade") != "adamw-v1":
        raise ValueError(f"{path}: not a spade AdamW state (metadata spade={meta.get('spade')!r})")
    step = int(meta.get("step", "0"))
    if step < 0:
        raise ValueError(f"{path}: AdamW step {step} is negative")
    tensors = st.load_file(path)
    sd = opt.state_dict()
    index = {}
    i = 0
    for group in opt.param_groups:
        for p in group["params"]:
            index[id(p)] = i
            i += 1
    state = {}
    for name, p in model.named_parameters():
        a, b = tensors.get("exp_avg/" + name), tensors.get("exp_avg_sq/" + name)
        if a is None or b is None:
            raise ValueError(f"{path}: no AdamW moments for parameter {name}")
        for key, t in (("exp_avg", a), ("exp_avg_sq", b)):
            if tuple(t.shape) != tuple(p.shape):
                raise ValueError(f"{path}: {key}/{name} shape {tuple(t.shape)} != parameter {tuple(p.shape)}")
        state[index[id(p)]] = {"step": torch.tensor(float(step)), "exp_avg": a.to(p.device), "exp_avg_sq": b.to(p.device)}
    sd["state"] = state
    opt.load_state_dict(sd)
    return step


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()

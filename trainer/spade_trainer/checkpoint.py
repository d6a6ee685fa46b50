"""Loading and saving policies as Hugging Face checkpoints (transformers).

A checkpoint directory holds what ``save_pretrained`` writes
(``config.json``, ``model.safetensors`` or shards with
``model.safetensors.index.json``, ``generation_config.json``), the
tokenizer files and chat template copied from the input checkpoint, and,
when written by this trainer, ``optimizer/`` (the fp32 master weights and
AdamW state saved sharded by torch.distributed.checkpoint, so the next
round resumes them exactly whatever the saved weights' dtype and whatever
the number of processes) and ``spade_checkpoint.json`` (lineage; written
last, so its presence marks a complete checkpoint).

``tiny:SEED`` names the tiny test model: transformers' Qwen3ForCausalLM in
a 2-layer, hidden-64 shape with the tiny byte-level BPE tokenizer
(tokenizer.tiny_tokenizer, vocabulary 4,096), weights drawn from a
generator seeded SEED.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from typing import Dict, List, Optional

import torch

from .tokenizer import TINY_MAX_LENGTH, HFChatEncoder, tiny_tokenizer

CHECKPOINT_META = "spade_checkpoint.json"
OPTIMIZER_DIR = "optimizer"
FORMAT_VERSION = 2

# Files copied verbatim from a Hugging Face checkpoint's tokenizer.
HF_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "generation_config.json",
)

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def tiny_hf_config(tokenizer=None) -> dict:
    """config.json of the tiny test model over ``tokenizer`` (default
    tiny_tokenizer(); any transformers tokenizer with eos and pad tokens):
    Qwen3, 2 layers, hidden 64, 4 query / 2 KV heads of dim 16,
    intermediate 128, tied embeddings, vocabulary the tokenizer's size
    rounded up to a multiple of 64."""
    tok = tokenizer if tokenizer is not None else tiny_tokenizer()
    vocab_size = -(-len(tok) // 64) * 64
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "vocab_size": vocab_size,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": TINY_MAX_LENGTH,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": True,
        "initializer_range": 0.02,
        "bos_token_id": None,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
    }


@dataclasses.dataclass
class Policy:
    """A loaded model with its chat encoder and lineage."""

    model: torch.nn.Module
    encoder: HFChatEncoder
    source: str  # the checkpoint argument as given
    source_dir: Optional[str]  # None for tiny:SEED
    parent_step: int
    optimizer_step: int = 0  # AdamW steps behind the saved optimizer state


def model_logits(
    model: torch.nn.Module,
    ids: torch.Tensor,
    position_ids: Optional[torch.Tensor] = None,
    cu_seq_lens: Optional[torch.Tensor] = None,
    max_len: int = 0,
    keep: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Logits of a transformers causal LM: (B, N, V) at every position, or
    (B, K, V) at the positions ``keep`` (K,) names (transformers'
    ``logits_to_keep``: the LM head runs on those hidden states only).
    With position_ids restarting at 0 for each packed sample and no
    attention mask, transformers keeps attention inside each sample;
    ``cu_seq_lens`` (the samples' cumulative lengths,
    attention.cu_seq_lens) and ``max_len`` are passed on as
    flash-attention's varlen arguments, which varlen_sdpa and
    flash_attention_2 use directly (sdpa and eager build a block diagonal
    mask from the position ids instead and ignore them)."""
    kw: dict = {}
    if cu_seq_lens is not None:
        kw = {"cu_seq_lens_q": cu_seq_lens, "cu_seq_lens_k": cu_seq_lens, "max_length_q": max_len, "max_length_k": max_len}
    if keep is not None:
        kw["logits_to_keep"] = keep
    return model(input_ids=ids, position_ids=position_ids, use_cache=False, **kw).logits


def parse_tiny(spec: str) -> Optional[int]:
    """Seed of a ``tiny:SEED`` spec, or None when spec is a directory."""
    if not spec.startswith("tiny:"):
        return None
    s = spec[len("tiny:") :]
    if not s.isdigit():
        raise ValueError(f"checkpoint {spec!r}: want tiny:SEED with SEED a non-negative integer")
    return int(s)


def new_tiny(seed: int, tokenizer=None) -> torch.nn.Module:
    """The tiny model over ``tokenizer`` (tiny_hf_config), weights drawn
    from a generator seeded ``seed``: normal(0, 0.02) for matmul and
    embedding weights, ones for norms, in named_parameters order
    (transformers' own init scheme, made reproducible across machines)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    d = tiny_hf_config(tokenizer)
    cfg = AutoConfig.for_model(d.pop("model_type"), **{k: v for k, v in d.items() if k != "architectures"})
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float32) * cfg.initializer_range)
    return model


def write_tiny(out_dir: str, seed: int, tokenizer=None, save_dtype: str = "float32") -> None:
    """Write the tiny model over ``tokenizer`` (default tiny_tokenizer())
    with weights seeded ``seed`` as a checkpoint directory (save_weights:
    config.json, safetensors in ``save_dtype``, the tokenizer's files),
    which load_policy, transformers and the wire server load. With
    tokenizer.byte_tokenizer() it is the tiny model as it was before the
    BPE tokenizer (vocabulary 320, the same weights for a seed); the
    trainer benchmark trains it for the byte-level workload."""
    tok = tokenizer if tokenizer is not None else tiny_tokenizer()
    model = new_tiny(seed, tok)
    policy = Policy(model, HFChatEncoder(tok), f"tiny:{seed}", None, 0)
    save_weights(policy, model.state_dict(), out_dir, save_dtype)


def same_tokenizer(a: Policy, b: Policy) -> bool:
    """Whether two policies map text to the same ids: equal model
    vocabulary sizes and equal tokenizer vocabularies (token -> id, added
    tokens included). A KL reference must pass against the policy (a run
    begun on the tiny model's former byte tokenizer keeps tiny:SEED as its
    reference, which is now the BPE model)."""
    if getattr(a.model.config, "vocab_size", None) != getattr(b.model.config, "vocab_size", None):
        return False
    return a.encoder.tok.get_vocab() == b.encoder.tok.get_vocab()


def read_meta(ckpt_dir: str) -> dict:
    """spade_checkpoint.json of ckpt_dir, or {} when absent (a Hub
    checkpoint). Raises ValueError for another format version."""
    meta_path = os.path.join(ckpt_dir, CHECKPOINT_META)
    if not os.path.exists(meta_path):
        return {}
    with open(meta_path, encoding="utf-8") as f:
        meta = json.load(f)
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{meta_path}: format_version {meta.get('format_version')!r}, this trainer reads {FORMAT_VERSION}")
    return meta


def load_policy(spec: str, attn_implementation: Optional[str] = None) -> Policy:
    """Load ``tiny:SEED`` or a checkpoint directory on CPU in float32 with
    attention ``attn_implementation`` (None: transformers' default; a
    custom name must be registered first, attention.register) and
    AutoModelForCausalLM (any architecture transformers has: Qwen3,
    Qwen3-MoE, Llama, ...). The tokenizer is AutoTokenizer's with the
    checkpoint's chat template (tiny_tokenizer for tiny:SEED; checkpoints
    of the tiny model written before it, with spade_tokenizer.json beside
    a byte-level tokenizer.json, load the same way with the same ids).
    Raises ValueError / FileNotFoundError / OSError naming the path."""
    seed = parse_tiny(spec)
    if seed is not None:
        tok = tiny_tokenizer()
        model = new_tiny(seed, tok)
        if attn_implementation:
            model.set_attn_implementation(attn_implementation)
        return Policy(model, HFChatEncoder(tok), spec, None, 0)
    if not os.path.isdir(spec):
        raise FileNotFoundError(f"checkpoint {spec!r}: not a directory and not tiny:SEED")
    if not os.path.exists(os.path.join(spec, "config.json")):
        raise FileNotFoundError(f"checkpoint {spec}: no config.json")
    meta = read_meta(spec)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    encoder = HFChatEncoder(AutoTokenizer.from_pretrained(spec))
    kw = {"attn_implementation": attn_implementation} if attn_implementation else {}
    model = AutoModelForCausalLM.from_pretrained(spec, dtype=torch.float32, **kw)
    return Policy(model, encoder, spec, spec, int(meta.get("step", 0)), int(meta.get("optimizer_step", 0)))


def _write_json(path: str, obj: object) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")


def save_weights(policy: Policy, state_dict: Dict[str, torch.Tensor], out_dir: str, save_dtype: str) -> None:
    """Write the servable checkpoint: ``save_pretrained`` of the full
    (consolidated) state dict cast to ``save_dtype`` as safetensors, and the
    tokenizer files (those of the input checkpoint, copied; for tiny:SEED
    the tokenizer's save_pretrained: tokenizer.json, tokenizer_config.json,
    chat_template.jinja). transformers, vLLM and SGLang load the result."""
    os.makedirs(out_dir, exist_ok=True)
    dtype = DTYPES[save_dtype]
    sd = {k: v.detach().to("cpu", dtype) for k, v in state_dict.items()}
    if getattr(policy.model.config, "tie_word_embeddings", False):
        # The LM head is the embedding: saved once, as transformers does
        # (FSDP's consolidated state dict lists both names).
        sd.pop("lm_head.weight", None)
    policy.model.save_pretrained(out_dir, state_dict=sd, safe_serialization=True)
    # save_pretrained writes the in-memory parameters' dtype (the fp32
    # master copy) into config.json whatever the state dict holds; servers
    # read it (vLLM's --dtype auto serves a float32 config in float16), so
    # it must name the dtype of the saved weights.
    cfg_path = os.path.join(out_dir, "config.json")
    with open(cfg_path, encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["dtype"] = save_dtype
    if "torch_dtype" in cfg:
        cfg["torch_dtype"] = save_dtype
    with open(cfg_path, "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    if policy.source_dir is None:
        policy.encoder.tok.save_pretrained(out_dir)
        # transformers 5 names its fast tokenizer class TokenizersBackend,
        # which 4.x releases (those many vLLM and SGLang versions pin) do
        # not know; PreTrainedTokenizerFast loads in both.
        tc_path = os.path.join(out_dir, "tokenizer_config.json")
        with open(tc_path, encoding="utf-8") as f:
            tc = json.load(f)
        if tc.get("tokenizer_class") == "TokenizersBackend":
            tc["tokenizer_class"] = "PreTrainedTokenizerFast"
            _write_json(tc_path, tc)
    else:
        for name in HF_TOKENIZER_FILES:
            src = os.path.join(policy.source_dir, name)
            if os.path.exists(src) and not os.path.exists(os.path.join(out_dir, name)):
                shutil.copyfile(src, os.path.join(out_dir, name))


def write_meta(policy: Policy, out_dir: str, lineage: Dict[str, object], optimizer_step: int) -> None:
    """spade_checkpoint.json, written last: format_version, step =
    parent_step + 1, parent, optimizer_step and ``lineage``."""
    meta = dict(lineage)
    meta.update(
        {
            "format_version": FORMAT_VERSION,
            "step": policy.parent_step + 1,
            "parent": policy.source,
            "parent_step": policy.parent_step,
            "optimizer_step": optimizer_step,
        }
    )
    _write_json(os.path.join(out_dir, CHECKPOINT_META), meta)


def files_of(out_dir: str) -> List[str]:
    """Every file under out_dir, relative and slash-separated, sorted."""
    out = []
    for root, _, names in os.walk(out_dir):
        for n in names:
            out.append(os.path.relpath(os.path.join(root, n), out_dir).replace(os.sep, "/"))
    return sorted(out)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()

"""A Qwen3-architecture decoder in plain PyTorch (no transformers needed).

Architecture as Hugging Face's ``Qwen3ForCausalLM`` (model_type "qwen3"):
pre-norm decoder layers of RMSNorm -> grouped-query self-attention with a
per-head RMSNorm on queries and keys (q_norm / k_norm, Qwen3's change over
Qwen2) applied before rotary embeddings -> residual -> RMSNorm -> SwiGLU MLP
(down(silu(gate(x)) * up(x))) -> residual; a final RMSNorm and an LM head that
is tied to the input embedding when ``tie_word_embeddings``. No biases.

Parameter names and config.json keys match transformers' Qwen3, so a
checkpoint saved here loads with ``AutoModelForCausalLM.from_pretrained`` and
is servable by vLLM, and a Qwen3 checkpoint from the Hub loads here.

Attention uses ``torch.nn.functional.scaled_dot_product_attention`` (flash /
memory-efficient kernels) when torch provides it (torch >= 2.0), else an
explicit causal softmax attention (torch 1.13). Sequences are right-padded;
with a causal mask real tokens never attend to the padding that follows them,
so no padding mask is needed, and pad positions are excluded from the loss.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

HAVE_SDPA = hasattr(F, "scaled_dot_product_attention")


@dataclasses.dataclass
class Qwen3Config:
    """Model hyper-parameters, named as in transformers' Qwen3Config.

    Defaults are Qwen3-0.6B's (596M parameters with tied embeddings).
    """

    vocab_size: int = 151936
    hidden_size: int = 1024
    intermediate_size: int = 3072
    num_hidden_layers: int = 28
    num_attention_heads: int = 16
    num_key_value_heads: int = 8
    head_dim: int = 128
    max_position_embeddings: int = 40960
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1000000.0
    tie_word_embeddings: bool = True
    initializer_range: float = 0.02
    bos_token_id: Optional[int] = 151643
    eos_token_id: Optional[int] = 151645

    def __post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads != 0:
            raise ValueError(f"num_attention_heads {self.num_attention_heads} not a multiple of num_key_value_heads {self.num_key_value_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for rotary embeddings")

    def to_hf_dict(self, torch_dtype: str = "float32") -> Dict[str, Any]:
        """config.json content as transformers writes it for Qwen3."""
        d = dataclasses.asdict(self)
        d.update(
            {
                "architectures": ["Qwen3ForCausalLM"],
                "model_type": "qwen3",
                "hidden_act": "silu",
                "attention_bias": False,
                "attention_dropout": 0.0,
                "rope_scaling": None,
                "use_sliding_window": False,
                "sliding_window": None,
                "max_window_layers": self.num_hidden_layers,
                "use_cache": True,
                "torch_dtype": torch_dtype,
            }
        )
        return d

    @classmethod
    def from_hf_dict(cls, d: Dict[str, Any]) -> "Qwen3Config":
        """Build from a config.json dict; refuses non-Qwen3 or unsupported
        options (biases, rope scaling, sliding window) instead of silently
        computing a different model."""
        if d.get("model_type") != "qwen3":
            raise ValueError(f"config.json model_type {d.get('model_type')!r}: the built-in model supports only 'qwen3'")
        if d.get("attention_bias"):
            raise ValueError("config.json attention_bias=true is not supported by the built-in model")
        if d.get("rope_scaling"):
            raise ValueError("config.json rope_scaling is not supported by the built-in model")
        if d.get("use_sliding_window"):
            raise ValueError("config.json use_sliding_window=true is not supported by the built-in model")
        if d.get("hidden_act", "silu") != "silu":
            raise ValueError(f"config.json hidden_act {d.get('hidden_act')!r}: want silu")
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        if "head_dim" not in d or d["head_dim"] is None:
            kw["head_dim"] = d["hidden_size"] // d["num_attention_heads"]
        eos = kw.get("eos_token_id")
        if isinstance(eos, list):
            kw["eos_token_id"] = eos[0] if eos else None
        return cls(**kw)

    def num_parameters(self) -> int:
        """Exact parameter count (tied embeddings counted once)."""
        h, i, v = self.hidden_size, self.intermediate_size, self.vocab_size
        q = self.num_attention_heads * self.head_dim
        kv = self.num_key_value_heads * self.head_dim
        layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h + 2 * self.head_dim
        total = v * h + self.num_hidden_layers * layer + h
        if not self.tie_word_embeddings:
            total += v * h
        return total


def tiny_config(vocab_size: int) -> Qwen3Config:
    """The built-in tiny test model: 2 layers, hidden 64, 4 heads / 2 KV
    heads of dim 16, intermediate 128, tied embeddings (~0.1M parameters)."""
    return Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=8192,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=None,
    )


class RMSNorm(nn.Module):
    """Root-mean-square norm computed in float32, as Qwen3RMSNorm."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


def rope_cos_sin(cfg: Qwen3Config, seq_len: int, device: torch.device) -> tuple:
    """Rotary tables (seq_len, head_dim), float32, positions 0..seq_len-1,
    in the non-interleaved "rotate half" layout transformers uses."""
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, device=device, dtype=torch.float32) / cfg.head_dim))
    pos = torch.arange(seq_len, device=device, dtype=torch.float32)
    freqs = torch.outer(pos, inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (batch, heads, seq, head_dim)."""
    cos = cos.to(x.dtype)
    sin = sin.to(x.dtype)
    return x * cos + _rotate_half(x) * sin


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention over (batch, heads, seq, head_dim) tensors; k and v
    already expanded to the query heads."""
    if HAVE_SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = torch.matmul(q, k.transpose(-1, -2)).float() * scale
    L = q.shape[-2]
    mask = torch.ones(L, L, dtype=torch.bool, device=q.device).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    probs = torch.softmax(scores, dim=-1).to(v.dtype)
    return torch.matmul(probs, v)


class Attention(nn.Module):
    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.cfg = cfg
        h, d = cfg.hidden_size, cfg.head_dim
        self.q_proj = nn.Linear(h, cfg.num_attention_heads * d, bias=False)
        self.k_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        self.v_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * d, h, bias=False)
        self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(d, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        cfg = self.cfg
        nh, nkv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        q = self.q_norm(self.q_proj(x).view(B, L, nh, d)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(B, L, nkv, d)).transpose(1, 2)
        v = self.v_proj(x).view(B, L, nkv, d).transpose(1, 2)
        # Under autocast q/k leave the fp32-weighted RMSNorm as fp32 while v
        # is bf16; attention kernels need one dtype (flash needs bf16/fp16).
        q = apply_rope(q, cos, sin).to(v.dtype)
        k = apply_rope(k, cos, sin).to(v.dtype)
        rep = nh // nkv
        if rep > 1:
            k = k[:, :, None].expand(B, nkv, rep, L, d).reshape(B, nh, L, d)
            v = v[:, :, None].expand(B, nkv, rep, L, d).reshape(B, nh, L, d)
        out = causal_attention(q, k, v)
        return self.o_proj(out.transpose(1, 2).reshape(B, L, nh * d))


class MLP(nn.Module):
    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3Model(nn.Module):
    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Qwen3ForCausalLM(nn.Module):
    """Qwen3 causal LM. ``forward(input_ids)`` -> logits (batch, seq, vocab).

    ``gradient_checkpointing`` recomputes each layer in backward (activation
    checkpointing), trading ~1/3 more compute for memory on long batches.
    """

    def __init__(self, cfg: Qwen3Config) -> None:
        super().__init__()
        self.config = cfg
        self.model = Qwen3Model(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.gradient_checkpointing = False

    def init_weights(self, generator: torch.Generator) -> None:
        """Initialise as transformers does (normal(0, initializer_range) for
        linear and embedding weights, ones for norms), from ``generator`` so
        a seed gives the same model on any machine."""
        std = self.config.initializer_range
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    p.fill_(1.0)
                else:
                    p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float32) * std)

    def hidden_states(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Final normed hidden states (batch, seq, hidden)."""
        B, L = input_ids.shape
        cos, sin = rope_cos_sin(self.config, L, input_ids.device)
        x = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin)
        return self.model.norm(x)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.hidden_states(input_ids))

    def hf_state_dict(self) -> Dict[str, torch.Tensor]:
        """State dict under transformers' names; ``lm_head.weight`` is left
        out when tied, as transformers saves tied Qwen3 checkpoints."""
        sd = {k: v for k, v in self.state_dict().items()}
        if self.config.tie_word_embeddings:
            sd.pop("lm_head.weight", None)
        return sd

    def load_hf_state_dict(self, sd: Dict[str, torch.Tensor]) -> None:
        """Load transformers-named weights (any float dtype; cast to the
        parameters' dtype). Missing or unexpected names raise ValueError
        listing them, except a tied ``lm_head.weight`` which may be absent
        or present."""
        own = self.state_dict()
        want = set(own)
        if self.config.tie_word_embeddings:
            want.discard("lm_head.weight")
            sd = {k: v for k, v in sd.items() if k != "lm_head.weight"}
        missing = sorted(want - set(sd))
        unexpected = sorted(set(sd) - set(own))
        if missing or unexpected:
            raise ValueError(f"checkpoint weights do not match the Qwen3 config: missing {missing[:5]}{'...' if len(missing) > 5 else ''}, unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}")
        with torch.no_grad():
            for k, v in sd.items():
                if tuple(own[k].shape) != tuple(v.shape):
                    raise ValueError(f"checkpoint weight {k}: shape {tuple(v.shape)}, config needs {tuple(own[k].shape)}")
                own[k].copy_(v.to(own[k].dtype))

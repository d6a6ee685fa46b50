"""Variable-length attention for packed micro-batches on any device.

A packed micro-batch is one row of N tokens holding several samples, each
restarting its position ids at 0 (grpo.MicroBatch). transformers keeps
attention inside each sample in two ways: flash attention's varlen kernels
(``flash_attention_2``/``_3``, given ``cu_seq_lens_q``/``_k``), or, for
SDPA and eager, a dense block-diagonal causal mask of N x N built from the
position ids. The dense mask makes every micro-batch cost N^2 attention
work (the sum of its samples' L^2 is what attention needs) and keeps SDPA
off its fused kernels; on the default round's batch (136 samples, 542k
tokens, 16k-token micro-batches) that is 2.8x the work, computed densely.

``varlen_sdpa`` is the same computation done the way the varlen kernels do
it, with torch's own scaled_dot_product_attention: the row is cut at the
samples' boundaries (``cu_seq_lens_q``, the cumulative lengths, as
flash-attention takes them) and each sample runs SDPA with
``is_causal=True`` and no mask, so torch picks its fused kernel (flash on
CPU and CUDA, efficient or cuDNN on CUDA) and the work is sum(L^2) / 2.
It is registered in transformers' AttentionInterface and
AttentionMaskInterface (the documented extension points of transformers
>= 4.48, docs "Attention Interface"), so the model code is transformers'
own. Numerically it is SDPA on each sample alone: the packed logits equal
the unpacked ones (trainer/tests/test_packed.py).
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import torch
import torch.nn.functional as F

#: The attn_implementation name under which varlen_sdpa is registered.
NAME = "varlen_sdpa"


def cu_seq_lens(lengths: Sequence[int], device: torch.device) -> torch.Tensor:
    """Cumulative sample lengths (len(lengths) + 1,) int32 starting at 0:
    flash-attention's ``cu_seqlens`` layout, which transformers passes to
    the attention function as ``cu_seq_lens_q``/``cu_seq_lens_k``."""
    out = [0]
    for n in lengths:
        out.append(out[-1] + int(n))
    return torch.tensor(out, dtype=torch.int32, device=device)


def _bounds(cu: Optional[torch.Tensor], position_ids: Optional[torch.Tensor], n: int, batch: int) -> List[int]:
    """Sample boundaries of a packed row of n tokens: from cu_seq_lens when
    given, else where the position ids restart at 0, else the whole row."""
    if cu is not None:
        if batch != 1:
            raise ValueError(f"{NAME}: cu_seq_lens needs one packed row, got a batch of {batch}")
        b = [int(x) for x in cu.tolist()]
        if b[0] != 0 or b[-1] != n or any(y < x for x, y in zip(b, b[1:])):
            raise ValueError(f"{NAME}: cu_seq_lens {b[:4]}...{b[-2:]} do not cover the row of {n} tokens")
        return b
    if position_ids is not None and batch == 1:
        starts = (position_ids[0] == 0).nonzero().flatten().tolist()
        if not starts or starts[0] != 0:
            starts = [0] + starts
        return starts + [n]
    return [0, n]


def varlen_sdpa(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Optional[torch.Tensor],
    dropout: float = 0.0,
    scaling: Optional[float] = None,
    sliding_window: Optional[int] = None,
    cu_seq_lens_q: Optional[torch.Tensor] = None,
    cu_seq_lens_k: Optional[torch.Tensor] = None,
    position_ids: Optional[torch.Tensor] = None,
    **kwargs,
):
    """transformers attention function (AttentionInterface signature):
    query (B, H, N, D), key/value (B, Hkv, N, D) with H a multiple of Hkv
    (grouped-query attention); returns ((B, N, H, D), None). Causal
    attention inside each packed sample (see the module doc). Raises
    ValueError for what it does not do rather than computing something
    else: a padding mask, a sliding window, differing q/k boundaries."""
    if sliding_window:
        raise ValueError(f"{NAME}: sliding-window attention is not supported; use attn_implementation sdpa or flash_attention_2")
    if cu_seq_lens_k is not None and cu_seq_lens_q is not None and not torch.equal(cu_seq_lens_k, cu_seq_lens_q):
        raise ValueError(f"{NAME}: cu_seq_lens_k differs from cu_seq_lens_q (only self-attention over packed samples)")
    if attention_mask is not None:
        raise ValueError(f"{NAME}: got an attention mask; packed rows carry no padding (pass position_ids or cu_seq_lens_q)")
    batch, heads, n, _ = query.shape
    groups = heads // key.shape[1]
    if groups > 1:
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    p = dropout if module.training else 0.0
    b = _bounds(cu_seq_lens_q, position_ids, n, batch)
    if len(b) == 2:
        out = F.scaled_dot_product_attention(query, key, value, dropout_p=p, is_causal=True, scale=scaling)
    else:
        parts = [
            F.scaled_dot_product_attention(query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], dropout_p=p, is_causal=True, scale=scaling)
            for s, e in zip(b, b[1:])
            if e > s
        ]
        out = torch.cat(parts, dim=2)
    return out.transpose(1, 2).contiguous(), None


def _no_mask(*args, attention_mask: Optional[torch.Tensor] = None, **kwargs):
    """Mask function for varlen_sdpa: no N x N mask is built. A 2-D padding
    mask with any zero is refused (varlen_sdpa has no padding)."""
    if attention_mask is not None and attention_mask.dim() == 2 and not bool(attention_mask.all()):
        raise ValueError(f"{NAME}: padded batches are not supported; pack the samples instead")
    return None


_registered = False


def register() -> str:
    """Register varlen_sdpa with transformers (idempotent); returns NAME."""
    global _registered
    if not _registered:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface

        AttentionInterface.register(NAME, varlen_sdpa)
        AttentionMaskInterface.register(NAME, _no_mask)
        _registered = True
    return NAME


def default_implementation(device: torch.device) -> str:
    """The trainer's attention when grpo.attn_implementation is "":
    flash_attention_2 on CUDA when the flash_attn package imports (true
    varlen kernels), else varlen_sdpa."""
    if device.type == "cuda":
        try:
            import flash_attn  # noqa: F401

            return "flash_attention_2"
        except ImportError:
            pass
    return register()

"""The GRPO update: token-level clipped surrogate with optional k3 KL.

For trained token t of sample i (advantage A_i from the batch, computed by
the Go side; weight w_i), with logp the current policy's log-prob of the
token, logp_old the policy's before this round's first optimiser step
(detached) and logp_ref the reference policy's:

    ratio_t = exp(logp_t - logp_old_t)
    pg      = -(1/T) * sum_{i,t} w_i * mask_t * min(ratio_t * A_i,
                                                 clip(ratio_t, 1-eps, 1+eps) * A_i)
    k3_t    = exp(logp_ref_t - logp_t) - (logp_ref_t - logp_t) - 1
    kl      = (1/T) * sum_{i,t} mask_t * k3_t
    loss    = pg + beta * kl

T is the number of trained tokens in the whole batch (token-level mean, as
DAPO / Dr. GRPO recommend over a per-sequence mean that favours short
sequences), so micro-batching with gradient accumulation gives the same
gradient as one full-batch step. k3 is Schulman's unbiased, non-negative
estimator of KL(policy || reference) (DeepSeekMath GRPO, eq. 4); the weight
w_i scales only the policy-gradient term.
"""

from __future__ import annotations

import dataclasses
import math
import resource
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .attention import cu_seq_lens
from .config import InputError, Sample, TrainConfig


@dataclasses.dataclass
class Encoded:
    """One tokenised sample: ids (L,), targets mask (L,) (1 = trained)."""

    ids: List[int]
    mask: List[int]
    advantage: float
    weight: float


def encode_batch(samples: Sequence[Sample], encoder, max_seq_len: int, where: str, overlong: str = "error", stats: dict | None = None) -> List[Encoded]:
    """Tokenise every sample with its role's token mask. A sample longer
    than max_seq_len tokens is handled by ``overlong``: "error" names its
    line; "truncate_left" keeps its last max_seq_len tokens (the context is
    cut from the start, as TRL/verl do with truncation_side="left", so the
    role's own final tokens, which earned the reward, are kept) when at
    least one trained token remains, and otherwise drops the sample;
    "drop" drops it. Truncated and dropped samples are counted in
    ``stats`` ("truncated_samples", "dropped_samples")."""
    if overlong not in ("error", "truncate_left", "drop"):
        raise InputError(f"overlong {overlong!r}: want error, truncate_left or drop")
    if stats is None:
        stats = {}
    stats.setdefault("truncated_samples", 0)
    stats.setdefault("dropped_samples", 0)
    out = []
    for s in samples:
        ids, mask = encoder.encode_chat(s.messages, s.trained_messages())
        if len(ids) > max_seq_len:
            if overlong == "error":
                raise InputError(f"{where}:{s.line}: sample {s.sample_id}: {len(ids)} tokens exceeds max_seq_len {max_seq_len}")
            if overlong == "drop" or sum(mask[len(ids) - max_seq_len + 1 :]) == 0:
                stats["dropped_samples"] += 1
                continue
            ids, mask = ids[len(ids) - max_seq_len :], mask[len(mask) - max_seq_len :]
            stats["truncated_samples"] += 1
        if sum(mask[1:]) == 0:
            raise InputError(f"{where}:{s.line}: sample {s.sample_id}: no trainable tokens after tokenisation")
        out.append(Encoded(ids, mask, s.advantage, s.weight))
    return out


@dataclasses.dataclass
class MicroBatch:
    """Samples packed into one row with no padding: ``ids``, ``position_ids``
    (restarting at 0 for each sample, which is how transformers tells packed
    samples apart and keeps attention inside each one), ``targets`` (the
    next token of the same sample; 0 where there is none) and ``mask`` (1
    where that target is a trained token) are all (1, N), N the sum of the
    samples' lengths; ``adv`` and ``weight`` are per token, (1, N), each
    sample's value repeated over its tokens."""

    ids: torch.Tensor  # (1, N) int64
    position_ids: torch.Tensor  # (1, N) int64
    targets: torch.Tensor  # (1, N) int64
    mask: torch.Tensor  # (1, N) float32
    adv: torch.Tensor  # (1, N) float32
    weight: torch.Tensor  # (1, N) float32
    tokens: int  # N: every token forwarded
    samples: int
    cu_seq_lens: Optional[torch.Tensor] = None  # (samples + 1,) int32: sample boundaries, 0 .. N
    max_len: int = 0  # the longest sample's length
    # (K,) int64: the positions whose target is trained (mask 1), K <= N.
    # Only their logits enter the loss, so the model is asked for those
    # alone (transformers' logits_to_keep): the LM head and the logits'
    # memory scale with the trained tokens, not with every token.
    keep: Optional[torch.Tensor] = None

    def kept(self, t: torch.Tensor) -> torch.Tensor:
        """t (1, N, ...) at the kept positions: (1, K, ...)."""
        return t if self.keep is None else t[:, self.keep]


def plan_micro_batches(lengths: Sequence[int], max_tokens: int, max_samples: int) -> List[List[int]]:
    """Indices of the samples of each micro-batch: samples sorted by (length,
    index) (deterministic), then filled greedily up to ``max_tokens`` tokens
    and ``max_samples`` samples. A sample longer than ``max_tokens`` gets a
    micro-batch of its own (nothing is cut here; max_seq_len bounds it)."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    out: List[List[int]] = []
    cur: List[int] = []
    n = 0
    for i in order:
        if cur and (n + lengths[i] > max_tokens or len(cur) >= max_samples):
            out.append(cur)
            cur, n = [], 0
        cur.append(i)
        n += lengths[i]
    if cur:
        out.append(cur)
    return out


def pack(chunk: Sequence[Encoded], device: torch.device) -> MicroBatch:
    """One packed micro-batch of ``chunk`` (see MicroBatch)."""
    ids: List[int] = []
    pos: List[int] = []
    tgt: List[int] = []
    mask: List[float] = []
    adv: List[float] = []
    weight: List[float] = []
    for e in chunk:
        L = len(e.ids)
        ids += e.ids
        pos += range(L)
        tgt += e.ids[1:] + [0]
        mask += [float(m) for m in e.mask[1:]] + [0.0]
        adv += [e.advantage] * L
        weight += [e.weight] * L

    def t(v, dtype):
        return torch.tensor(v, dtype=dtype).unsqueeze(0).to(device)

    return MicroBatch(
        ids=t(ids, torch.long),
        position_ids=t(pos, torch.long),
        targets=t(tgt, torch.long),
        mask=t(mask, torch.float32),
        adv=t(adv, torch.float32),
        weight=t(weight, torch.float32),
        tokens=len(ids),
        samples=len(chunk),
        cu_seq_lens=cu_seq_lens([len(e.ids) for e in chunk], device),
        max_len=max(len(e.ids) for e in chunk),
        keep=torch.tensor([i for i, m in enumerate(mask) if m], dtype=torch.long).to(device),
    )


def make_micro_batches(enc: Sequence[Encoded], max_tokens: int, device: torch.device, max_samples: int = 1 << 30) -> List[MicroBatch]:
    """The batch as packed micro-batches of at most ``max_tokens`` tokens
    (grpo.max_tokens_per_micro_batch) and ``max_samples`` samples."""
    plan = plan_micro_batches([len(e.ids) for e in enc], max_tokens, max_samples)
    return [pack([enc[i] for i in idx], device) for idx in plan]


def token_logps(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(targets[:, t] | tokens up to t) as float32, shape of targets:
    logits (B, N, V) at every position, targets (B, N)."""
    lg = logits.float()
    return lg.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(lg, dim=-1)


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: Optional[torch.Tensor],
    adv: torch.Tensor,
    weight: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float,
    kl_beta: float,
    norm_tokens: float,
    clip_eps_high: Optional[float] = None,
) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """The module-level loss for one micro-batch, normalised by the whole
    batch's trained-token count ``norm_tokens``. Shapes: logp/old/ref/mask
    (B, T), adv/weight (B,). Returns (loss, sums) where sums holds detached
    per-micro-batch sums: pg, kl (both already / norm_tokens) and clipped
    (number of tokens where the clipped branch was active, i.e. the token
    gets no gradient: A > 0 and ratio > 1+eps, or A < 0 and ratio < 1-eps).
    """
    hi = clip_eps_high if clip_eps_high else clip_eps
    a = adv[:, None] if adv.dim() == 1 else adv
    w = weight[:, None] if weight.dim() == 1 else weight
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * a
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + hi) * a
    surr = torch.min(unclipped, clipped)
    pg = -(surr * w * mask).sum() / norm_tokens
    loss = pg
    kl = torch.zeros((), device=logp.device)
    if ref_logp is not None and kl_beta > 0:
        d = ref_logp - logp
        kl = ((torch.exp(d) - d - 1.0) * mask).sum() / norm_tokens
        loss = loss + kl_beta * kl
    with torch.no_grad():
        active = ((a > 0) & (ratio > 1.0 + hi)) | ((a < 0) & (ratio < 1.0 - clip_eps))
        n_clipped = (active.float() * mask).sum()
    return loss, {"pg": pg.detach(), "kl": kl.detach(), "clipped": n_clipped}


def peak_memory_bytes(device: torch.device) -> int:
    """CUDA: torch's peak allocated bytes on the device. CPU: the process's
    peak resident set size (Linux reports ru_maxrss in KiB)."""
    if device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(device))
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def make_optimizer(params, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """AdamW; fused on CUDA when this torch has it (torch >= 2.0)."""
    kw = dict(lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps, weight_decay=cfg.weight_decay)
    if device.type == "cuda":
        try:
            return torch.optim.AdamW(params, fused=True, **kw)
        except (TypeError, RuntimeError):
            pass
    return torch.optim.AdamW(params, **kw)


def train_round(
    logits_fn: Callable[[MicroBatch], torch.Tensor],
    params: List[torch.nn.Parameter],
    opt: torch.optim.Optimizer,
    micro: Sequence[MicroBatch],
    cfg: TrainConfig,
    device: torch.device,
    amp_dtype: Optional[torch.dtype],
    ref_logits_fn: Optional[Callable[[MicroBatch], torch.Tensor]] = None,
    emit: Callable[[dict], None] = lambda m: None,
) -> List[dict]:
    """Run cfg.inner_steps optimiser steps on the batch; return metrics.

    Under torchrun each rank forwards its share of the micro-batches; the
    metrics are sums over ranks, the same as one process's.

    On the first inner step logp_old is the step's own detached log-prob
    (ratio exactly 1) and is kept for later steps, so no separate forward
    pass is spent on it; with no reference_checkpoint the reference is the
    input policy, i.e. logp_old. Raises RuntimeError on a non-finite loss or
    gradient norm (the checkpoint would be garbage).
    """
    from . import dist as D

    world, rank = D.world(), D.rank()
    norm_tokens = float(sum(float(mb.mask.sum()) for mb in micro))
    if norm_tokens == 0:
        raise InputError("batch has no trained tokens")
    total_tokens = sum(mb.tokens for mb in micro)
    # Rank r takes micro-batches r, r + world, ...; every rank runs the same
    # number of forward/backward passes (FSDP's collectives must match), a
    # rank short of one runs a one-token pass whose loss is multiplied by 0.
    mine = list(range(rank, len(micro), world))
    rounds = -(-len(micro) // world)
    filler = micro[0]
    # FSDP2 averages gradients over ranks; the loss is a sum over the
    # batch's tokens, so each rank's share is scaled back up by world.
    scale = float(world)
    old: Dict[int, torch.Tensor] = {}
    ref: Dict[int, torch.Tensor] = {}
    def kept_logps(logits: torch.Tensor, mb: MicroBatch) -> torch.Tensor:
        # A logits_fn may return every position (N) or the kept ones (K).
        if logits.shape[1] == mb.tokens:
            logits = mb.kept(logits)
        return token_logps(logits, mb.kept(mb.targets))

    if ref_logits_fn is not None and cfg.kl_beta > 0:
        with torch.no_grad():
            for j in mine:
                with _autocast(device, amp_dtype):
                    ref[j] = kept_logps(ref_logits_fn(micro[j]), micro[j])
    metrics = []
    for step in range(1, cfg.inner_steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), device=device)
        kl_sum = torch.zeros((), device=device)
        clipped = torch.zeros((), device=device)
        for k in range(rounds):
            if k < len(mine):
                j = mine[k]
                mb = micro[j]
                with _autocast(device, amp_dtype):
                    logits = logits_fn(mb)
                logp = kept_logps(logits, mb)
                if j not in old:
                    old[j] = logp.detach()
                r = ref.get(j, old[j])
                loss, sums = grpo_loss(logp, old[j], r, mb.kept(mb.adv), mb.kept(mb.weight), mb.kept(mb.mask), cfg.clip_epsilon, cfg.kl_beta, norm_tokens, cfg.clip_epsilon_high)
                (loss * scale).backward()
                loss_sum += loss.detach()
                kl_sum += sums["kl"]
                clipped += sums["clipped"]
            else:
                with _autocast(device, amp_dtype):
                    logits = logits_fn(filler)
                (logits.float().sum() * 0.0).backward()
        max_norm = cfg.grad_clip if cfg.grad_clip > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        if hasattr(grad_norm, "full_tensor"):  # a DTensor under FSDP2
            grad_norm = grad_norm.full_tensor()
        sums_t = D.all_sum(torch.stack([loss_sum, kl_sum, clipped]))
        # One host sync per optimiser step: the values are needed for the
        # finite checks and the metrics line anyway.
        gn = float(grad_norm)
        lv, klv, clv = (float(x) for x in sums_t)
        if not (math.isfinite(gn) and math.isfinite(lv)):
            raise RuntimeError(f"inner step {step}: non-finite loss {lv} or grad norm {gn}; refusing to write a checkpoint")
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dt = time.perf_counter() - t0
        m = {
            "step": step,
            "loss": lv,
            "kl": klv,
            "clip_fraction": clv / norm_tokens,
            "grad_norm": gn,
            "tokens": total_tokens,
            "trained_tokens": int(norm_tokens),
            "tokens_per_s": total_tokens / dt if dt > 0 else 0.0,
            "seconds": dt,
            "peak_memory_bytes": peak_memory_bytes(device),
            "lr": opt.param_groups[0]["lr"],
            "micro_batches": len(micro),
        }
        metrics.append(m)
        emit(m)
    return metrics


class _NullCtx:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _autocast(device: torch.device, dtype: Optional[torch.dtype]):
    if dtype is None:
        return _NullCtx()
    return torch.autocast(device_type=device.type, dtype=dtype)

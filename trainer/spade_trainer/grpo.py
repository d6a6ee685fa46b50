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
sequences; loss_aggregation "token_mean", verl's "token-mean"), so
micro-batching with gradient accumulation gives the same gradient as one
full-batch step. With loss_aggregation "sample_mean" (verl's
"seq-mean-token-mean"; slime's default, get_sum_of_sample_mean with the
loss scaled by 1 / global_batch_size, which the public SPADE launchers
use) each token's 1/T is 1/(N T_i) instead: N the batch's trained
samples, T_i the trained tokens of token t's sample, over all its pieces
(loss_scales). It is still a sum of per-token terms, so micro-batching
leaves it unchanged too. k3 is Schulman's unbiased, non-negative
estimator of KL(policy || reference) (DeepSeekMath GRPO, eq. 4); the weight
w_i scales only the policy-gradient term.

Truncated importance sampling (``tis_cap`` > 0): the tokens were sampled
by a server (vLLM, SGLang) whose log-probs logp_sampler differ from the
trainer's for the same weights (other kernels, dtype, batch) and more when
it served other weights. Each trained token with a sampler log-prob gets

    w_t = min(exp(logp_old_t - logp_sampler_t), tis_cap)    detached
    pg  = -(1/T) * sum_{i,t} w_i * mask_t * w_t * min(ratio_t * A_i, clip(ratio_t) * A_i)

and every other token w_t = 1; KL is not weighted. This is the public
SPADE code's ``--use-tis`` (slime, ``spade/slime/spade_tis.py``:
``pg_loss * clamp(exp(old_log_probs - rollout_log_probs), tis_clip_low,
tis_clip)``, slime's defaults 0 and 2; Yao et al., "Your efficient RL
framework secretly brings you off-policy RL training", 2025), with the
lower bound 0. The same logp_old is compared with logp_sampler for the
mismatch metrics (train_round).
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
from .tokenizer import prepare_messages


@dataclasses.dataclass
class Encoded:
    """One packed piece of a tokenised sample: ids (L,), targets mask (L,)
    (1 = trained), and ``sampler`` (L,) the sampler's log-prob of token t
    where the batch row gave one, NaN elsewhere (None: none at all). A
    sample built from text is one piece; one built from the sampled ids is
    one piece per run of prefix-extending turns (encode_batch)."""

    ids: List[int]
    mask: List[int]
    advantage: float
    weight: float
    sampler: Optional[List[float]] = None
    # The trained sample the piece belongs to (pieces of one sample share
    # it): numbered in batch order, one per row or, with agent_samples
    # "turn", one per agent turn. loss_scales counts a sample's trained
    # tokens over its pieces.
    sample: int = -1
    # The loss coefficient of each of the piece's trained tokens in place
    # of 1/T (loss_scales); None: 1/T, the token mean.
    scale: Optional[float] = None


NAN = float("nan")


def _pieces_from_ids(s: Sample, msgs: List[dict], encoder, stats: dict, train_reasoning: str = "generated",
                     train: Optional[Sequence[int]] = None) -> Tuple[List[Tuple[List[int], List[int], List[float]]], bool]:
    """The sample built from the ids the server sampled (docs/training.md
    "Training on the sampled tokens"): for trained turn i the context is
    its prompt_token_ids, else the template's rendering of messages[:i]
    with the generation prompt; the completion is completion_token_ids, all
    trained. One running sequence is extended while it is a prefix of the
    next turn's context; otherwise it is closed as a piece of its own and
    a new one starts, so each turn trains in the context it was sampled
    in. ``train`` is the trained turns (default s.trained_messages()).
    With train_reasoning "none" a completion's reasoning block
    (encoder.reasoning_end) stays in the sequence untrained. Returns
    ([(ids, mask, sampler log-probs)], whether a context was rendered by
    the template rather than taken from prompt_token_ids)."""
    pieces = []
    rendered = False
    ids: List[int] = []
    mask: List[int] = []
    lp: List[float] = []
    for i in (s.trained_messages() if train is None else train):
        m = s.messages[i]
        if "prompt_token_ids" in m:
            ctx = list(m["prompt_token_ids"])
        else:
            ctx = encoder.context_ids(msgs[:i], s.tools)
            rendered = True
        comp = list(m["completion_token_ids"])
        clp = m.get("completion_logprobs")
        if clp is None or len(clp) != len(comp):
            if clp is not None:
                stats["logprob_length_mismatch_turns"] += 1
            clp = [NAN] * len(comp)
        if ids and ctx[: len(ids)] != ids:
            pieces.append((ids, mask, lp))
            ids, mask, lp = [], [], []
        tail = ctx[len(ids) :]
        think = encoder.reasoning_end(comp) if train_reasoning == "none" else 0
        stats["reasoning_tokens_untrained"] += think
        ids = ids + tail + comp
        mask = mask + [0] * len(tail) + [0] * think + [1] * (len(comp) - think)
        lp = lp + [NAN] * len(tail) + [float(x) for x in clp]
    pieces.append((ids, mask, lp))
    return pieces, rendered


def _untrain_reasoning(ids: List[int], mask: List[int], encoder) -> int:
    """Text path, train_reasoning "none": in each trained run of mask (one
    trained turn as the template rendered it), the reasoning block
    (encoder.reasoning_end: a template such as Qwen3's renders an empty
    one, <think>\n\n</think>\n\n, before the last turn's answer) is set
    untrained. Returns the tokens untrained."""
    n = 0
    t = 0
    while t < len(mask):
        if not mask[t]:
            t += 1
            continue
        end = t
        while end < len(mask) and mask[end]:
            end += 1
        think = encoder.reasoning_end(ids[t:end])
        for k in range(t, t + think):
            mask[k] = 0
        n += think
        t = end
    return n


def encode_batch(samples: Sequence[Sample], encoder, max_seq_len: int, where: str, overlong: str = "error", stats: dict | None = None,
                 vocab_size: Optional[int] = None, train_reasoning: str = "generated", agent_samples: str = "play") -> List[Encoded]:
    """Tokenise every sample with its role's token mask: from the ids the
    server sampled when every trained turn has completion_token_ids (one or
    more pieces, _pieces_from_ids), else from the text (one piece, the
    encoder's encode_chat). Tool calls are rendered by the chat template
    when it renders them, else as spade's JSON text
    (tokenizer.prepare_messages). A piece longer than max_seq_len tokens
    is handled by ``overlong``: "error" names its line; "truncate_left"
    keeps its last max_seq_len tokens (the context is cut from the start,
    as TRL/verl do with truncation_side="left", so the role's own final
    tokens, which earned the reward, are kept) when at least one trained
    token remains, and otherwise drops the piece; "drop" drops it. Counts
    go to ``stats``: truncated_samples / dropped_samples (samples with a
    piece truncated / with no piece left), truncated_pieces /
    dropped_pieces, token_id_samples, text_samples, pieces (kept),
    tool_calls_as_text (samples whose tool calls were rendered as spade's
    JSON because the template renders none), logprob_length_mismatch_turns
    (turns whose completion_logprobs is not parallel to their ids, so they
    have no sampler log-prob), reasoning_tokens_untrained and
    reasoning_only_pieces (below). ``vocab_size`` bounds the batch's
    token ids (an id outside it is an input error naming its line).
    ``train_reasoning`` "none" trains no token of a trained turn's
    reasoning block (through its first </think> and the whitespace
    after it, encoder.reasoning_end), on both paths; the block stays in
    the sequence as context. A piece left with no trained token by that
    (a turn that was all reasoning) is dropped and counted as a
    reasoning_only_piece, not an input error.

    ``agent_samples`` "turn" makes each assistant turn i of an agent row a
    sample of its own (Encoded.sample): messages[:i+1] with turn i
    trained, from its ids when it has completion_token_ids, else from
    text, with the row's advantage and weight. A template that rewrites
    earlier turns (Qwen3's drops their <think> blocks and gives the last
    turn an empty one) then trains each turn in the context it was
    sampled in, and no rendering has to be a prefix of a later one's;
    turn_samples counts these samples. Designer rows train their last
    message as before."""
    if train_reasoning not in ("generated", "none"):
        raise InputError(f"train_reasoning {train_reasoning!r}: want generated or none")
    if agent_samples not in ("play", "turn"):
        raise InputError(f"agent_samples {agent_samples!r}: want play or turn")
    if overlong not in ("error", "truncate_left", "drop"):
        raise InputError(f"overlong {overlong!r}: want error, truncate_left or drop")
    if stats is None:
        stats = {}
    for k in ("truncated_samples", "dropped_samples", "truncated_pieces", "dropped_pieces", "token_id_samples", "text_samples",
              "pieces", "tool_calls_as_text", "logprob_length_mismatch_turns", "reasoning_tokens_untrained", "reasoning_only_pieces", "turn_samples"):
        stats.setdefault(k, 0)
    out = []
    key = 0  # Encoded.sample of the next trained sample
    for s in samples:
        msgs, as_text = prepare_messages(encoder, s.messages, s.tools)
        # The trained samples of the row: (trained turns, messages they
        # need), one for the row or, per turn, one for each assistant turn.
        if agent_samples == "turn" and s.role == "agent":
            units = [([i], i + 1) for i in s.trained_messages()]
            stats["turn_samples"] += len(units)
        else:
            units = [(s.trained_messages(), len(s.messages))]
        from_ids = [all("completion_token_ids" in s.messages[i] for i in train) for train, _ in units]
        if any(from_ids) and vocab_size is not None:
            for i, m in enumerate(s.messages):
                for k in ("completion_token_ids", "prompt_token_ids"):
                    bad = [t for t in m.get(k, ()) if t >= vocab_size]
                    if bad:
                        raise InputError(f"{where}:{s.line}: field messages[{i}].{k}: token id {bad[0]} is outside the checkpoint's vocabulary of {vocab_size}")
        pieces = []
        rendered_any = False
        for (train, end), ids_path in zip(units, from_ids):
            if ids_path:
                got, rendered = _pieces_from_ids(s, msgs, encoder, stats, train_reasoning, train)
                pieces += [(ids, mask, lp, key) for ids, mask, lp in got]
                stats["token_id_samples"] += 1
            else:
                ids, mask = encoder.encode_chat(msgs[:end], train, s.tools)
                if train_reasoning == "none":
                    stats["reasoning_tokens_untrained"] += _untrain_reasoning(ids, mask, encoder)
                pieces.append((ids, mask, None, key))
                stats["text_samples"] += 1
                rendered = True
            rendered_any = rendered_any or rendered
            key += 1
        if as_text and rendered_any:
            stats["tool_calls_as_text"] += 1
        kept = 0
        truncated = False
        for ids, mask, lp, sk in pieces:
            if train_reasoning == "none" and sum(mask[1:]) == 0:
                stats["reasoning_only_pieces"] += 1
                continue
            if len(ids) > max_seq_len:
                if overlong == "error":
                    raise InputError(f"{where}:{s.line}: sample {s.sample_id}: {len(ids)} tokens exceeds max_seq_len {max_seq_len}")
                if overlong == "drop" or sum(mask[len(ids) - max_seq_len + 1 :]) == 0:
                    stats["dropped_pieces"] += 1
                    continue
                cut = len(ids) - max_seq_len
                ids, mask = ids[cut:], mask[cut:]
                lp = lp[cut:] if lp is not None else None
                stats["truncated_pieces"] += 1
                truncated = True
            if sum(mask[1:]) == 0:
                raise InputError(f"{where}:{s.line}: sample {s.sample_id}: no trainable tokens after tokenisation")
            out.append(Encoded(ids, mask, s.advantage, s.weight, lp, sample=sk))
            kept += 1
        stats["pieces"] += kept
        if kept == 0:
            stats["dropped_samples"] += 1
        elif truncated:
            stats["truncated_samples"] += 1
    return out


def trained_tokens(e: Encoded) -> int:
    """The trained tokens of piece e: its loss-mask ones (target_columns:
    a token is a target of the position before it, so the first token is
    never one)."""
    return sum(e.mask[1:])


def loss_scales(enc: Sequence[Encoded], aggregation: str) -> None:
    """Set each piece's loss coefficient for ``aggregation``:
    "token_mean" leaves them None (every trained token weighs 1/T, T the
    batch's trained tokens); "sample_mean" sets 1/(N T_i), N the number of
    samples with a trained token and T_i the trained tokens of the
    piece's sample summed over its pieces (Encoded.sample), so each sample
    weighs 1/N whatever its length or its number of pieces. InputError on
    another value."""
    if aggregation == "token_mean":
        for e in enc:
            e.scale = None
        return
    if aggregation != "sample_mean":
        raise InputError(f"loss_aggregation {aggregation!r}: want token_mean or sample_mean")
    per: Dict[int, int] = {}
    for e in enc:
        per[e.sample] = per.get(e.sample, 0) + trained_tokens(e)
    n = sum(1 for t in per.values() if t > 0)
    for e in enc:
        t = per[e.sample]
        e.scale = 1.0 / (n * t) if t > 0 else 0.0


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
    # (1, N) float32: the sampler's log-prob of each target (the server's
    # completion_logprobs), NaN where there is none; None when no sample of
    # the micro-batch has one.
    sampler_logp: Optional[torch.Tensor] = None
    # (1, N) float32: each token's loss coefficient in place of 1/T
    # (Encoded.scale, loss_scales); None: the token mean.
    scale: Optional[torch.Tensor] = None

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


def target_columns(e: Encoded) -> Tuple[List[int], List[float], List[float]]:
    """One piece's per-token columns aligned with its next-token targets,
    each of length L = len(e.ids): position t predicts token t + 1, so
    targets[t] = ids[t + 1], mask[t] = e.mask[t + 1] (1.0 when that
    target is a trained token: the loss mask) and sampler[t] =
    e.sampler[t + 1] (the sampler's log-prob of that target, NaN where
    there is none); the last position has no target (0, mask 0.0, NaN).
    The one place where the token mask becomes the loss mask: an
    off-by-one here trains the token beside each completion token."""
    L = len(e.ids)
    targets = e.ids[1:] + [0]
    mask = [float(m) for m in e.mask[1:]] + [0.0]
    # e.sampler[t] is the log-prob of token t, i.e. of target t - 1.
    sampler = (e.sampler[1:] if e.sampler is not None else [NAN] * (L - 1)) + [NAN]
    return targets, mask, sampler


def pack(chunk: Sequence[Encoded], device: torch.device) -> MicroBatch:
    """One packed micro-batch of ``chunk`` (see MicroBatch); each piece's
    targets, loss mask and sampler log-probs are target_columns'."""
    ids: List[int] = []
    pos: List[int] = []
    tgt: List[int] = []
    mask: List[float] = []
    adv: List[float] = []
    weight: List[float] = []
    sampler: List[float] = []
    scale: List[float] = []
    for e in chunk:
        L = len(e.ids)
        ids += e.ids
        pos += range(L)
        t_tgt, t_mask, t_sampler = target_columns(e)
        tgt += t_tgt
        mask += t_mask
        sampler += t_sampler
        adv += [e.advantage] * L
        weight += [e.weight] * L
        scale += [e.scale if e.scale is not None else 0.0] * L
    has_sampler = any(e.sampler is not None for e in chunk)
    scaled = [e.scale is not None for e in chunk]
    if any(scaled) and not all(scaled):
        raise ValueError("pack: some pieces have a loss coefficient and others none (loss_scales sets all or none)")

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
        sampler_logp=t(sampler, torch.float32) if has_sampler else None,
        scale=t(scale, torch.float32) if all(scaled) else None,
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
    tis: Optional[torch.Tensor] = None,
    token_scale: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, Dict[str, torch.Tensor]]:
    """The module-level loss for one micro-batch, normalised by the whole
    batch's trained-token count ``norm_tokens``. Shapes: logp/old/ref/mask
    (B, T), adv/weight (B,). Returns (loss, sums) where sums holds detached
    per-micro-batch sums: pg, kl (both already / norm_tokens) and clipped
    (number of tokens where the clipped branch was active, i.e. the token
    gets no gradient: A > 0 and ratio > 1+eps, or A < 0 and ratio < 1-eps).
    ``tis`` (B, T), detached, multiplies each token's policy-gradient term
    (truncated importance sampling, tis_weights; None = 1).
    ``token_scale`` (B, T), when given, is each token's coefficient in
    place of 1 / norm_tokens in pg and kl (loss_aggregation sample_mean:
    1/(N T_i), loss_scales).
    """
    hi = clip_eps_high if clip_eps_high else clip_eps
    a = adv[:, None] if adv.dim() == 1 else adv
    w = weight[:, None] if weight.dim() == 1 else weight
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * a
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + hi) * a
    surr = torch.min(unclipped, clipped)
    if tis is not None:
        surr = surr * tis
    if token_scale is None:
        pg = -(surr * w * mask).sum() / norm_tokens
    else:
        pg = -(surr * w * mask * token_scale).sum()
    loss = pg
    kl = torch.zeros((), device=logp.device)
    if ref_logp is not None and kl_beta > 0:
        d = ref_logp - logp
        if token_scale is None:
            kl = ((torch.exp(d) - d - 1.0) * mask).sum() / norm_tokens
        else:
            kl = ((torch.exp(d) - d - 1.0) * mask * token_scale).sum()
        loss = loss + kl_beta * kl
    with torch.no_grad():
        active = ((a > 0) & (ratio > 1.0 + hi)) | ((a < 0) & (ratio < 1.0 - clip_eps))
        n_clipped = (active.float() * mask).sum()
    return loss, {"pg": pg.detach(), "kl": kl.detach(), "clipped": n_clipped}


def tis_weights(old_logp: torch.Tensor, sampler_logp: Optional[torch.Tensor], cap: float) -> Tuple[Optional[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Truncated importance sampling: w_t = min(exp(logp_old_t -
    logp_sampler_t), cap) on tokens with a sampler log-prob (finite
    sampler_logp), 1 elsewhere; detached. Returns (w or None when cap is 0
    or no token has a sampler log-prob, tokens where the cap bound, tokens
    with a sampler log-prob)."""
    zero = torch.zeros((), device=old_logp.device)
    if sampler_logp is None:
        return None, zero, zero
    has = torch.isfinite(sampler_logp)
    n = has.float().sum()
    if cap <= 0:
        return None, zero, n
    with torch.no_grad():
        raw = torch.exp(old_logp.detach() - torch.where(has, sampler_logp, old_logp.detach()))
        w = torch.where(has, torch.clamp(raw, max=cap), torch.ones_like(raw))
        bound = (has & (raw > cap)).float().sum()
    return w, bound, n


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


def _kept_logps(logits: torch.Tensor, mb: MicroBatch) -> torch.Tensor:
    """Log-probs of mb's kept targets; a logits_fn may return every
    position (N) or the kept ones (K)."""
    if logits.shape[1] == mb.tokens:
        logits = mb.kept(logits)
    return token_logps(logits, mb.kept(mb.targets))


class _SamplerStats:
    """This rank's sampler/trainer log-prob comparison, summed over its
    micro-batches on the first inner step (0-d tensors on the device):
    mm_sum, mm_n and mm_max are the sum, count and max of |logp_old -
    logp_sampler| over the tokens with a sampler log-prob, tis_bound and
    tis_n the tokens where tis_cap bound and those with a sampler
    log-prob."""

    def __init__(self, device: torch.device) -> None:
        self.mm_sum = torch.zeros((), device=device)
        self.mm_n = torch.zeros((), device=device)
        self.mm_max = torch.zeros((), device=device)
        self.tis_bound = torch.zeros((), device=device)
        self.tis_n = torch.zeros((), device=device)

    def add(self, old: torch.Tensor, mb: MicroBatch, cap: float) -> Optional[torch.Tensor]:
        """Count micro-batch mb, whose first-step log-probs are old; return
        its TIS weights (tis_weights with cap)."""
        sl = mb.kept(mb.sampler_logp) if mb.sampler_logp is not None else None
        if sl is not None:
            has = torch.isfinite(sl)
            d = torch.where(has, (old - sl).abs(), torch.zeros_like(sl))
            self.mm_sum += d.sum()
            self.mm_n += has.float().sum()
            self.mm_max = torch.maximum(self.mm_max, d.max() if d.numel() else self.mm_max)
        w, bound, n_s = tis_weights(old, sl, cap)
        self.tis_bound += bound
        self.tis_n += n_s
        return w


@dataclasses.dataclass
class _RoundPlan:
    """How one rank takes part in a round: rank r forwards micro-batches
    r, r + world, ... (mine); every rank runs the same number of
    forward/backward passes (rounds: FSDP's collectives must match), a
    rank short of one runs a one-token pass on filler whose loss is
    multiplied by 0. FSDP2 averages gradients over ranks; the loss is a
    sum over the batch's tokens, so each rank's share is scaled back up by
    scale = world. norm_tokens is the batch's trained tokens (T),
    total_tokens all its tokens."""

    mine: List[int]
    rounds: int
    filler: MicroBatch
    scale: float
    norm_tokens: float
    total_tokens: int


def _plan_round(micro: Sequence[MicroBatch], world: int, rank: int) -> _RoundPlan:
    """The _RoundPlan of rank of world; a batch with no trained token is
    an InputError."""
    norm_tokens = float(sum(float(mb.mask.sum()) for mb in micro))
    if norm_tokens == 0:
        raise InputError("batch has no trained tokens")
    return _RoundPlan(
        mine=list(range(rank, len(micro), world)),
        rounds=-(-len(micro) // world),
        filler=micro[0],
        scale=float(world),
        norm_tokens=norm_tokens,
        total_tokens=sum(mb.tokens for mb in micro),
    )


def _accumulate(
    logits_fn: Callable[[MicroBatch], torch.Tensor],
    micro: Sequence[MicroBatch],
    plan: _RoundPlan,
    cfg: TrainConfig,
    device: torch.device,
    amp_dtype: Optional[torch.dtype],
    old: Dict[int, torch.Tensor],
    ref: Dict[int, torch.Tensor],
    tis: Dict[int, Optional[torch.Tensor]],
    stats: _SamplerStats,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One inner step's forward/backward passes over this rank's
    micro-batches, gradients accumulating in the parameters. A
    micro-batch seen for the first time keeps its detached log-probs as
    logp_old (old) and is counted in stats (its TIS weights go to tis);
    the reference is ref's entry or logp_old. Returns this rank's (loss,
    KL and clipped-token sums), detached."""
    loss_sum = torch.zeros((), device=device)
    kl_sum = torch.zeros((), device=device)
    clipped = torch.zeros((), device=device)
    for k in range(plan.rounds):
        if k < len(plan.mine):
            j = plan.mine[k]
            mb = micro[j]
            with _autocast(device, amp_dtype):
                logits = logits_fn(mb)
            logp = _kept_logps(logits, mb)
            if j not in old:
                old[j] = logp.detach()
                tis[j] = stats.add(old[j], mb, cfg.tis_cap)
            r = ref.get(j, old[j])
            scale = mb.kept(mb.scale) if mb.scale is not None else None
            loss, sums = grpo_loss(logp, old[j], r, mb.kept(mb.adv), mb.kept(mb.weight), mb.kept(mb.mask), cfg.clip_epsilon, cfg.kl_beta, plan.norm_tokens,
                                   cfg.clip_epsilon_high, tis[j], scale)
            (loss * plan.scale).backward()
            loss_sum += loss.detach()
            kl_sum += sums["kl"]
            clipped += sums["clipped"]
        else:
            with _autocast(device, amp_dtype):
                logits = logits_fn(plan.filler)
            (logits.float().sum() * 0.0).backward()
    return loss_sum, kl_sum, clipped


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
    warn: Callable[[str], None] = lambda line: None,
) -> List[dict]:
    """Run cfg.inner_steps optimiser steps on the batch; return metrics.

    Under torchrun each rank forwards its share of the micro-batches
    (_RoundPlan); the metrics are sums over ranks, the same as one
    process's.

    On the first inner step logp_old is the step's own detached log-prob
    (ratio exactly 1) and is kept for later steps, so no separate forward
    pass is spent on it; with no reference_checkpoint the reference is the
    input policy, i.e. logp_old. Raises RuntimeError on a non-finite loss or
    gradient norm (the checkpoint would be garbage).

    The same first-step logp_old is compared with the sampler's log-probs
    (MicroBatch.sampler_logp) on every trained token that has one: metrics
    logprob_mismatch_mean / _max (|logp_old - logp_sampler|, nats) and
    sampler_logprob_tokens, measured once and repeated on every step's
    line; ``warn`` gets one line when the mean exceeds cfg.mismatch_warn.
    With cfg.tis_cap > 0 each such token's policy-gradient term is
    multiplied by tis_weights (tis_clip_fraction: the share of them where
    the cap bound).

    A metric with no data is None (JSON null), never 0: the mismatch mean
    and max and tis_clip_fraction when no token has a sampler log-prob
    (a server that returns none, e.g. ``transformers serve``),
    tis_clip_fraction also with tis_cap 0 (no cap applied), kl with kl_beta
    0 (not computed), tokens_per_s when the step took no measurable time.
    """
    from . import dist as D

    plan = _plan_round(micro, D.world(), D.rank())
    old: Dict[int, torch.Tensor] = {}
    ref: Dict[int, torch.Tensor] = {}
    tis: Dict[int, Optional[torch.Tensor]] = {}
    stats = _SamplerStats(device)
    if ref_logits_fn is not None and cfg.kl_beta > 0:
        with torch.no_grad():
            for j in plan.mine:
                with _autocast(device, amp_dtype):
                    ref[j] = _kept_logps(ref_logits_fn(micro[j]), micro[j])
    metrics = []
    for step in range(1, cfg.inner_steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_sum, kl_sum, clipped = _accumulate(logits_fn, micro, plan, cfg, device, amp_dtype, old, ref, tis, stats)
        max_norm = cfg.grad_clip if cfg.grad_clip > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        if hasattr(grad_norm, "full_tensor"):  # a DTensor under FSDP2
            grad_norm = grad_norm.full_tensor()
        sums_t = D.all_sum(torch.stack([loss_sum, kl_sum, clipped, stats.mm_sum, stats.mm_n, stats.tis_bound, stats.tis_n]))
        mmax = D.all_max(stats.mm_max)
        # One host sync per optimiser step: the values are needed for the
        # finite checks and the metrics line anyway.
        gn = float(grad_norm)
        lv, klv, clv, mms, mmn, tb, tn = (float(x) for x in sums_t)
        mm_mean = mms / mmn if mmn > 0 else None
        if step == 1 and mm_mean is not None and mm_mean > cfg.mismatch_warn:
            warn(
                f"spade_trainer: warning: mean |logp_trainer - logp_sampler| {mm_mean:.4g} nats over {int(mmn)} sampled tokens "
                f"(max {float(mmax):.4g}) exceeds mismatch_warn {cfg.mismatch_warn:g}: the server sampled with other weights, "
                "numerics or token ids than the trainer's"
            )
        if not (math.isfinite(gn) and math.isfinite(lv)):
            raise RuntimeError(f"inner step {step}: non-finite loss {lv} or grad norm {gn}; refusing to write a checkpoint")
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dt = time.perf_counter() - t0
        m = {
            "step": step,
            "loss": lv,
            "kl": klv if cfg.kl_beta > 0 else None,
            "clip_fraction": clv / plan.norm_tokens,
            "grad_norm": gn,
            "tokens": plan.total_tokens,
            "trained_tokens": int(plan.norm_tokens),
            "tokens_per_s": plan.total_tokens / dt if dt > 0 else None,
            "seconds": dt,
            "peak_memory_bytes": peak_memory_bytes(device),
            "lr": opt.param_groups[0]["lr"],
            "micro_batches": len(micro),
            "logprob_mismatch_mean": mm_mean,
            "logprob_mismatch_max": float(mmax) if mmn > 0 else None,
            "sampler_logprob_tokens": int(mmn),
            "tis_clip_fraction": tb / tn if tn > 0 and cfg.tis_cap > 0 else None,
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

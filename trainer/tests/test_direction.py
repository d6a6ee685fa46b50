"""The GRPO step moves each sample's completion log-prob the way its
advantage says, and only its completion tokens carry the policy gradient
(issue 41, item 2).

One real round of the trainer, through the CLI's own code path
(``cli.run``: batch JSONL -> load_batch -> encode_batch (tokenisation and
token masks) -> make_micro_batches (packing; ``target_columns`` turns the
token mask into the loss mask) -> train_round (grpo_loss, backward, AdamW
step) -> the saved checkpoint), on the tiny model (``tiny:SEED``, 336k
parameters, CPU, about a second), over a batch of three groups: in each,
one sample is rewarded (advantage > 0) and one penalised (advantage < 0).
``check_step`` then asserts two things, each independent of the code
under test where it can be:

1. The gradient attribution of the step (deterministic). For every
   position the loss reads a log-prob at (the micro-batch's kept
   positions), dloss/dlogp_t is captured during the step. The positions
   that carry a policy gradient must be exactly the sample's trained
   turns, located from the batch rows and the tokenizer alone, not from
   the trainer's masks (for an agent every assistant turn, for a designer
   its last one: the content's tokens and the closing ``<|im_end|>``
   after the turn's ``<|im_start|>assistant`` header; also compared as
   decoded text), and each must carry -w_i * A_i / T (T the batch's
   completion tokens; the first inner step's ratio is exactly 1, so no
   clip is active, and kl_beta is 0), whose sign pushes the token up for
   A_i > 0 and down for A_i < 0. Every other target (the system and user
   turns, the chat template's headers and newlines, a designer's earlier
   assistant turns: mask 0) gets no policy gradient: a position the loss
   reads no log-prob at has none by construction, and one it reads shows
   as a "prompt or template" target pushed up or down.
2. The outcome of the step. Each sample's completion log-prob (the sum
   over its trained tokens of log p(token | prefix), nats, measured with
   the trainer's encode_batch, pack, model_logits and token_logps on the
   input policy and on the written checkpoint) goes up by more than
   MIN_MOVE for A_i > 0 and down by more than MIN_MOVE for A_i < 0.

FaultTest injects three faults into the trainer's own functions during the
step only (the measurements before and after are the unpatched code) and
asserts that check_step then fails, with the wrong-direction or
wrong-token line that names the fault's victims: the advantage's sign
flipped in the surrogate (grpo.grpo_loss), two samples' advantages
swapped where they are attached to the encoded samples (the
encode_batch the CLI calls), and the loss mask shifted by one token either
way (grpo.target_columns).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import sys
import tempfile
import unittest
from typing import Callable, ContextManager, Dict, List, Tuple
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import torch  # noqa: E402

from spade_trainer import checkpoint as ck  # noqa: E402
from spade_trainer import cli, grpo  # noqa: E402
from spade_trainer.config import parse_sample  # noqa: E402
from trainer_configs import write_config  # noqa: E402

SEED = 5
CHECKPOINT = f"tiny:{SEED}"
# AdamW's first step moves every parameter by about lr (m / sqrt(v) is
# +-1), 5% of the tiny model's init scale 0.02: large enough that each
# completion's log-prob moves by tenths of a nat, small enough that the
# step stays first-order (the move follows the gradient's sign).
LR = 1e-3
# nats: the least |change| of a completion log-prob that counts as a move
# in the advantage's direction. Measured on this batch (torch 2.11, CPU,
# float32): the clean step moves the six samples by +0.64, -0.83, +0.73,
# -1.49, +1.63, -1.84; the flipped sign moves each the wrong way by 0.53
# to 1.65; test_clean_step_passes asks for 10 x MIN_MOVE of margin and
# prints the values when it fails.
MIN_MOVE = 0.01
# Relative tolerance on dloss/dlogp_t = -w_i A_i / T (float32 sums).
GRAD_RTOL = 1e-4

IM_END = "<|im_end|>"


def _row(sid: str, role: str, group: str, msgs: List[dict], reward: float, adv: float, weight: float = 1.0) -> dict:
    return {"sample_id": sid, "role": role, "group": group, "messages": msgs, "reward": reward, "advantage": adv, "weight": weight}


def _fruit(answer: str) -> List[dict]:
    return [{"role": "system", "content": "You pick fruit."}, {"role": "user", "content": "Pick a fruit."},
            {"role": "assistant", "content": answer}]


def _door(first: str, second: str) -> List[dict]:
    return [{"role": "user", "content": "obs: door"}, {"role": "assistant", "content": first},
            {"role": "user", "content": "obs: key"}, {"role": "assistant", "content": second}]


def _design(answer: str) -> List[dict]:
    return [{"role": "user", "content": "Design an env"}, {"role": "assistant", "content": "draft"},
            {"role": "user", "content": "retry"}, {"role": "assistant", "content": answer}]


def batch_rows() -> List[dict]:
    """Three groups of two, advantages as the Go side computes them
    (docs/training.md "Advantages"): agent groups with rewards 1 and 0
    (population std 0.5: advantages +1 and -1), one two-turn; a designer
    skill with rewards 0.4 and -0.6 (centred: +0.5 and -0.5, norm none)
    and weight 3, whose earlier assistant turn "draft" is context, not
    trained. Every completion's first and last token differ from the
    template tokens beside them, so a loss mask shifted by one token
    trains other tokens than the completion's."""
    return [
        _row("fruit-win", "agent", "fruit", _fruit("apple"), 1.0, 1.0),
        _row("fruit-lose", "agent", "fruit", _fruit("stone"), 0.0, -1.0),
        _row("door-win", "agent", "door", _door("open", "take key"), 1.0, 1.0),
        _row("door-lose", "agent", "door", _door("wait", "drop key"), 0.0, -1.0),
        _row("design-win", "designer", "logic", _design("class E: pass"), 0.4, 0.5, 3.0),
        _row("design-lose", "designer", "logic", _design("print(1)"), -0.6, -0.5, 3.0),
    ]


def trained_texts(row: dict) -> List[str]:
    """What the row's role trains, from the row alone (docs/training.md
    "Batch file"): every assistant turn of an agent, the last assistant
    turn of a designer; each as its content and the closing <|im_end|>."""
    turns = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
    if row["role"] == "designer":
        turns = turns[-1:]
    return [t + IM_END for t in turns]


@dataclasses.dataclass
class Step:
    """What one round did. ``before`` / ``after``: each row's completion
    log-prob (nats, summed over its trained tokens) under the input
    policy and the written checkpoint. ``grads``: per row, the positions
    the loss read a log-prob at, as {position in the row's ids: (target
    id, dloss/dlogp)}. ``ids``: each row's token ids. ``trained``: the
    batch's trained-token count T the trainer reported."""

    rows: List[dict]
    ids: List[List[int]]
    before: List[float]
    after: List[float]
    grads: List[Dict[int, Tuple[int, float]]]
    trained: int
    tok: object  # the checkpoint's transformers tokenizer

    def decode(self, ids: List[int]) -> str:
        return self.tok.decode(ids)


def completion_logps(spec: str, rows: List[dict]) -> Tuple[List[float], List[List[int]], object]:
    """Each row's completion log-prob under the checkpoint ``spec``: the
    sum over its trained targets of log p(target | prefix) in float32
    (trainer code: load_policy, encode_batch, pack, model_logits,
    token_logps), one row per forward. Returns (log-probs, the rows' ids,
    the tokenizer)."""
    policy = ck.load_policy(spec)
    policy.model.eval()
    samples = [parse_sample(json.dumps(r), f"mem:{i + 1}") for i, r in enumerate(rows)]
    enc = grpo.encode_batch(samples, policy.encoder, 8192, "mem")
    assert len(enc) == len(rows), "one piece per text sample"
    out = []
    with torch.no_grad():
        for e in enc:
            mb = grpo.pack([e], torch.device("cpu"))
            logits = ck.model_logits(policy.model, mb.ids, mb.position_ids, mb.cu_seq_lens, mb.max_len, mb.keep)
            out.append(float(grpo.token_logps(logits, mb.kept(mb.targets)).sum()))
    return out, [e.ids for e in enc], policy.encoder.tok


@contextlib.contextmanager
def capture_logp_grads(store: List[Tuple[grpo.MicroBatch, torch.Tensor]]):
    """Keep every micro-batch's trained log-probs (1, K) with their
    gradient (retain_grad) while the round runs, beside the micro-batch
    whose kept positions they are (grpo._kept_logps is where the loss's
    log-probs are read from the logits)."""
    real = grpo._kept_logps

    def kept(logits, mb):
        lp = real(logits, mb)
        if lp.requires_grad:
            lp.retain_grad()
            store.append((mb, lp))
        return lp

    with mock.patch.object(grpo, "_kept_logps", kept):
        yield


def _attribute(captured, ids: List[List[int]]) -> List[Dict[int, Tuple[int, float]]]:
    """The captured gradients per row: each kept position of a packed
    micro-batch mapped to its sample (cu_seq_lens) and the sample to its
    row by its token ids."""
    row_of = {tuple(x): i for i, x in enumerate(ids)}
    grads: List[Dict[int, Tuple[int, float]]] = [{} for _ in ids]
    for mb, lp in captured:
        assert lp.grad is not None, "the round did not back-propagate into the loss's log-probs"
        cu = mb.cu_seq_lens.tolist()
        for k, pos in enumerate(mb.keep.tolist()):
            s = next(j for j in range(len(cu) - 1) if cu[j] <= pos < cu[j + 1])
            i = row_of[tuple(mb.ids[0, cu[s]:cu[s + 1]].tolist())]
            grads[i][pos - cu[s]] = (int(mb.targets[0, pos]), float(lp.grad[0, k]))
    return grads


def run_step(workdir: str, rows: List[dict], fault: Callable[[], ContextManager] = contextlib.nullcontext) -> Step:
    """One round of ``python -m spade_trainer`` in process (cli.run) on
    ``rows`` from CHECKPOINT, with ``fault`` active during the round
    only; the log-probs before and after are measured outside it."""
    batch = os.path.join(workdir, "batch.jsonl")
    with open(batch, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    # One inner step, float32 throughout; 48-token micro-batches, so the
    # six samples (17 to 37 tokens) are packed into several.
    config = write_config(os.path.join(workdir, "config.json"), lr=LR, device="cpu", dtype="float32", save_dtype="float32",
                          save_optimizer=False, max_tokens_per_micro_batch=48, seed=SEED)
    out, metrics = os.path.join(workdir, "out"), os.path.join(workdir, "metrics.jsonl")
    before, ids, tok = completion_logps(CHECKPOINT, rows)
    captured: List[Tuple[grpo.MicroBatch, torch.Tensor]] = []
    err = io.StringIO()
    with capture_logp_grads(captured), fault(), contextlib.redirect_stderr(err):
        rc = cli.run(["--batch", batch, "--checkpoint", CHECKPOINT, "--output", out, "--config", config, "--metrics", metrics])
    assert rc == 0, f"trainer exit {rc}: {err.getvalue()}"
    with open(metrics, encoding="utf-8") as f:
        steps = [m for m in map(json.loads, f) if "step" in m]
    assert len(steps) == 1 and steps[0]["micro_batches"] > 1, steps
    after, _, _ = completion_logps(out, rows)
    return Step(rows, ids, before, after, _attribute(captured, ids), steps[0]["trained_tokens"], tok)


def _runs(grads: Dict[int, Tuple[int, float]]) -> List[List[int]]:
    """The positions carrying a policy gradient (dloss/dlogp != 0), as
    runs of consecutive positions."""
    out: List[List[int]] = []
    for p in sorted(q for q, (_, g) in grads.items() if g != 0.0):
        if out and out[-1][-1] == p - 1:
            out[-1].append(p)
        else:
            out.append([p])
    return out


def expected_positions(step: Step, i: int) -> Tuple[List[int], List[str]]:
    """The positions of row i whose targets its role trains, found from
    the row and the tokenizer alone (not from the trainer's masks): the
    k-th trained assistant turn's tokens follow the k-th
    "<|im_start|>assistant\\n" header of the rendered chat, so its
    targets sit at the header's last position and the len(content
    tokens) + 1 positions from there (the last one predicts <|im_end|>).
    Returns (positions, problems: a turn whose tokens are not there)."""
    r, ids = step.rows[i], step.ids[i]
    header = step.tok("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    starts = [p + len(header) - 1 for p in range(len(ids) - len(header) + 1) if ids[p : p + len(header)] == header]
    turns = [m["content"] for m in r["messages"] if m["role"] == "assistant"]
    if r["role"] == "designer":
        turns, starts = turns[-1:], starts[-1:]
    out, problems = [], []
    for content, h in zip(turns, starts):
        want = step.tok(content, add_special_tokens=False)["input_ids"] + [step.tok.convert_tokens_to_ids(IM_END)]
        if ids[h + 1 : h + 1 + len(want)] != want:
            problems.append(f"sample {r['sample_id']}: the turn {content!r} is not tokenized after its header as alone")
        out += range(h, h + len(want))
    if len(starts) != len(turns):
        problems.append(f"sample {r['sample_id']}: {len(starts)} assistant headers for {len(turns)} trained turns")
    return out, problems


def _gradient_problems(step: Step) -> List[str]:
    """Check 1 of the module doc: where the policy gradient goes, with
    which sign and size."""
    problems = []
    located = [expected_positions(step, i) for i in range(len(step.rows))]
    for _, bad in located:
        problems += bad
    T = sum(len(where) for where, _ in located)
    pushed = sum(len(run) for g in step.grads for run in _runs(g))
    if not pushed == step.trained == T:
        problems.append(f"{pushed} positions carry a policy gradient and the trainer reports {step.trained} trained tokens; "
                        f"the batch's completions have {T}")
    for i, r in enumerate(step.rows):
        sid, adv, w = r["sample_id"], r["advantage"], r["weight"]
        up = "up" if adv > 0 else "down"
        grads = step.grads[i]
        got = [step.decode([grads[p][0] for p in run]) for run in _runs(grads)]
        want = trained_texts(r)
        if got != want:
            problems.append(f"sample {sid}: the policy gradient reached the targets {got}; want the completion tokens {want} only "
                            "(every other target, prompt and template, mask 0)")
        expected, ids = set(located[i][0]), step.ids[i]
        # The first inner step's ratio is exactly 1 (no clip active) and
        # kl_beta is 0: dloss/dlogp_t = -w_i A_i / T.
        expect = -w * adv / T
        for p in sorted(set(grads) | expected):
            tok = step.decode([ids[p + 1]]) if p + 1 < len(ids) else "<none>"
            g = grads.get(p, (0, 0.0))[1]
            if p not in expected:
                if g != 0.0:
                    problems.append(f"sample {sid}: target {tok!r} at {p} (prompt or template, mask 0) is pushed "
                                    f"{'up' if g < 0 else 'down'} (dloss/dlogp {g:+.4g}); want no policy gradient")
            elif g == 0.0:
                problems.append(f"sample {sid} (advantage {adv:+g}): completion token {tok!r} at {p} gets no policy gradient; want {up}")
            elif (g < 0) != (adv > 0):
                problems.append(f"sample {sid} (advantage {adv:+g}): token {tok!r} at {p} is pushed {'up' if g < 0 else 'down'} "
                                f"(dloss/dlogp {g:+.4g}); want {up}")
            elif abs(g - expect) > GRAD_RTOL * abs(expect):
                problems.append(f"sample {sid}: token {tok!r} at {p} has dloss/dlogp {g:+.6g}; want -w*A/T = {expect:+.6g} "
                                f"(w {w:g}, A {adv:+g}, T {T})")
    return problems


def _outcome_problems(step: Step) -> List[str]:
    """Check 2 of the module doc: each completion log-prob moved the
    advantage's way by more than MIN_MOVE."""
    problems = []
    for r, b, a in zip(step.rows, step.before, step.after):
        adv, d = r["advantage"], a - b
        ok = d > MIN_MOVE if adv > 0 else d < -MIN_MOVE
        if not ok:
            want = f"up by more than {MIN_MOVE:g}" if adv > 0 else f"down by more than {MIN_MOVE:g}"
            problems.append(f"sample {r['sample_id']} (advantage {adv:+g}): completion log-prob went "
                            f"{'up' if d > 0 else 'down'} by {abs(d):.4g} nats ({b:.4f} -> {a:.4f}); want {want}")
    return problems


def check_step(step: Step) -> None:
    """Raise AssertionError listing every problem of checks 1 and 2 (module
    doc): a gradient-attribution line per wrong token, an outcome line
    "completion log-prob went <way>" per sample that moved the wrong way."""
    problems = _gradient_problems(step) + _outcome_problems(step)
    if problems:
        raise AssertionError("the GRPO step moved the wrong tokens or the wrong way:\n  " + "\n  ".join(problems))


def moves(step: Step) -> str:
    """The measured changes, for messages: sample: before -> after."""
    return ", ".join(f"{r['sample_id']} {b:.4f} -> {a:.4f}" for r, b, a in zip(step.rows, step.before, step.after))


@contextlib.contextmanager
def flipped_sign():
    """Fault: the surrogate gets -A (grpo.grpo_loss called with the
    advantages negated)."""
    real = grpo.grpo_loss

    def loss(logp, old_logp, ref_logp, adv, *a, **kw):
        return real(logp, old_logp, ref_logp, -adv, *a, **kw)

    with mock.patch.object(grpo, "grpo_loss", loss):
        yield


def swapped(a: str, b: str):
    """Fault: samples a's and b's advantages exchanged where the encoded
    samples get them (the encode_batch the CLI calls), as a row mix-up
    would."""

    @contextlib.contextmanager
    def fault():
        real = cli.encode_batch

        def encode(samples, *args, **kw):
            enc = real(samples, *args, **kw)
            i, j = ([s.sample_id for s in samples].index(x) for x in (a, b))
            enc[i].advantage, enc[j].advantage = enc[j].advantage, enc[i].advantage
            return enc

        with mock.patch.object(cli, "encode_batch", encode):
            yield

    return fault


def shifted_mask(by: int):
    """Fault: the loss mask off by one token (grpo.target_columns): by +1,
    position t trains target t+1 when token t is trained (the mask not
    moved onto the targets), so each completion's first token is dropped
    and the template's token after it trained; by -1 the header's last
    token is trained and the closing <|im_end|> dropped."""

    @contextlib.contextmanager
    def fault():
        real = grpo.target_columns

        def columns(e):
            tgt, mask, sampler = real(e)
            mask = [0.0] + mask[:-1] if by > 0 else mask[1:] + [0.0]
            return tgt, mask, sampler

        with mock.patch.object(grpo, "target_columns", columns):
            yield

    return fault


class DirectionTest(unittest.TestCase):
    def test_clean_step_passes(self):
        """The trainer as it is: every completion token, and only those,
        carries -w A / T, and every completion log-prob moves the
        advantage's way by more than MIN_MOVE."""
        with tempfile.TemporaryDirectory() as d:
            step = run_step(d, batch_rows())
        check_step(step)
        least = min(abs(a - b) for a, b in zip(step.after, step.before))
        self.assertGreater(least, 10 * MIN_MOVE, f"the step barely moves some sample, so MIN_MOVE is too close: {moves(step)}")


class FaultTest(unittest.TestCase):
    """Each fault, injected into the step, makes check_step fail with
    the lines that name it."""

    def failure(self, fault) -> str:
        with tempfile.TemporaryDirectory() as d:
            step = run_step(d, batch_rows(), fault)
        with self.assertRaises(AssertionError, msg=f"check_step passed a faulty step: {moves(step)}") as cm:
            check_step(step)
        return str(cm.exception)

    def test_flipped_sign_moves_every_sample_the_wrong_way(self):
        msg = self.failure(flipped_sign)
        for r in batch_rows():
            way = "down" if r["advantage"] > 0 else "up"
            self.assertRegex(msg, f"sample {r['sample_id']} \\(advantage [^)]*\\): completion log-prob went {way}")
            self.assertRegex(msg, f"sample {r['sample_id']} \\(advantage [^)]*\\): token .* is pushed {way}")

    def test_swapped_advantages_move_both_samples_the_wrong_way(self):
        msg = self.failure(swapped("fruit-win", "door-lose"))
        self.assertRegex(msg, r"sample fruit-win \(advantage \+1\): completion log-prob went down")
        self.assertRegex(msg, r"sample door-lose \(advantage -1\): completion log-prob went up")
        self.assertRegex(msg, r"sample fruit-win \(advantage \+1\): token 'ap' at \d+ is pushed down")
        self.assertNotRegex(msg, "sample (fruit-lose|door-win|design-win|design-lose) .*pushed")

    def test_shifted_mask_trains_the_tokens_beside_the_completion(self):
        """+1: the template's newline after each <|im_end|> is pushed the
        advantage's way and each completion's first token not at all;
        -1: the header's newline is pushed and <|im_end|> not at all.
        Either way every sample fails, at both ends of each trained turn."""
        cases = {
            1: (["ple<|im_end|>\n"], r"target '\\n' at 31 \(prompt or template, mask 0\) is pushed up", "'ap' at 28"),
            -1: (["\napple"], r"target '\\n' at 27 \(prompt or template, mask 0\) is pushed up", "'<\\|im_end\\|>' at 30"),
        }
        for by, (fruit, pushed, dropped) in cases.items():
            with self.subTest(by=by):
                msg = self.failure(shifted_mask(by))
                self.assertIn(f"sample fruit-win: the policy gradient reached the targets {fruit!r}", msg)
                self.assertRegex(msg, "sample fruit-win: " + pushed)
                self.assertRegex(msg, r"sample fruit-win \(advantage \+1\): completion token " + dropped + " gets no policy gradient; want up")
                self.assertRegex(msg, r"sample fruit-lose: target '\\n' at \d+ \(prompt or template, mask 0\) is pushed down")
                for r in batch_rows():
                    self.assertIn(f"sample {r['sample_id']}: the policy gradient reached the targets", msg)
                    turns = len(trained_texts(r))
                    self.assertEqual(msg.count(f"sample {r['sample_id']}: target "), turns, msg)
                    self.assertEqual(len(re.findall(f"sample {r['sample_id']} \\([^)]*\\): completion token .* gets no policy gradient", msg)), turns, msg)


if __name__ == "__main__":
    unittest.main()

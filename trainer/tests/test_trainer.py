"""Tests of the spade_trainer package (stdlib unittest, CPU, torch >= 1.13).

Run: /usr/bin/python3 -m unittest discover -s trainer/tests
"""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
import re
import tempfile
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import torch  # noqa: E402

from spade_trainer import checkpoint as ck  # noqa: E402
from spade_trainer import safetensors_io as st  # noqa: E402
from spade_trainer.config import InputError, Sample, TrainConfig, load_batch, load_config, parse_sample  # noqa: E402
from spade_trainer.grpo import encode_batch, grpo_loss, make_micro_batches, make_optimizer, token_logps, train_round  # noqa: E402
from spade_trainer.model import Qwen3Config, Qwen3ForCausalLM, tiny_config  # noqa: E402
from spade_trainer.tokenizer import CHAT_TEMPLATE, ByteTokenizer, HFChatEncoder  # noqa: E402


def sample(sid, role, group, msgs, adv, weight=1.0, reward=0.0):
    return {"sample_id": sid, "role": role, "group": group, "messages": msgs, "reward": reward, "advantage": adv, "weight": weight}


AGENT_MSGS = [
    {"role": "system", "content": "You play a game."},
    {"role": "user", "content": "obs: door"},
    {"role": "assistant", "content": "open"},
    {"role": "user", "content": "obs: key"},
    {"role": "assistant", "content": "take key"},
]
DESIGN_MSGS = [
    {"role": "user", "content": "Design an env"},
    {"role": "assistant", "content": "draft"},
    {"role": "user", "content": "retry"},
    {"role": "assistant", "content": "class E: pass"},
]


def fixed_batch():
    return [
        sample("a1", "agent", "env1", AGENT_MSGS, 1.0),
        sample("a2", "agent", "env1", [{"role": "user", "content": "obs"}, {"role": "assistant", "content": "wait"}], -1.0),
        sample("d1", "designer", "logic", DESIGN_MSGS, 0.5, weight=3.0, reward=0.4),
    ]


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def to_samples(rows):
    return [parse_sample(json.dumps(r), f"mem:{i + 1}") for i, r in enumerate(rows)]


class TokenizerTest(unittest.TestCase):
    def test_chat_layout_and_masks(self):
        tok = ByteTokenizer()
        msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
        ids, mask = tok.encode_chat(msgs, [1])
        # <|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n
        want = [257] + list(b"user\nhi") + [258] + list(b"\n") + [257] + list(b"assistant\n") + list(b"yo") + [258] + list(b"\n")
        self.assertEqual(ids, want)
        trained = [i for i, m in zip(ids, mask) if m]
        self.assertEqual(trained, list(b"yo") + [258])

    def test_special_text_is_not_a_special_token(self):
        ids, _ = ByteTokenizer().encode_chat([{"role": "assistant", "content": "<|im_end|>"}], [0])
        self.assertEqual(ids.count(258), 1)  # only the real end of turn

    def test_designer_trains_last_response_only(self):
        s = to_samples([sample("d", "designer", "g", DESIGN_MSGS, 1.0)])[0]
        self.assertEqual(s.trained_messages(), [3])
        a = to_samples([sample("a", "agent", "g", AGENT_MSGS, 1.0)])[0]
        self.assertEqual(a.trained_messages(), [2, 4])

    def test_hf_tokenizer_json_maps_bytes_to_ids(self):
        with tempfile.TemporaryDirectory() as d:
            ByteTokenizer().save(d, 128)
            with open(os.path.join(d, "tokenizer.json")) as f:
                tj = json.load(f)
            vocab = tj["model"]["vocab"]
            self.assertEqual(len(vocab), 256)
            self.assertEqual(sorted(vocab.values()), list(range(256)))
            self.assertEqual(vocab["a"], ord("a"))
            self.assertEqual({a["content"]: a["id"] for a in tj["added_tokens"]}, {"<|endoftext|>": 256, "<|im_start|>": 257, "<|im_end|>": 258})


class FakeHFTokenizer:
    """The parts of a transformers tokenizer that HFChatEncoder uses, over
    ByteTokenizer's ids, behaving as transformers documents them: special
    and added tokens in the text become their ids unless
    split_special_tokens=True; apply_chat_template renders ChatML.
    ``rewrite`` is applied to each content by the template (as templates
    that trim or cut contents do)."""

    def __init__(self, rewrite=lambda c: c):
        self.b = ByteTokenizer()
        self.rewrite = rewrite
        self.pad_token_id = self.b.pad_id
        self.eos_token_id = self.b.im_end_id
        self.all_special_tokens = ["<|endoftext|>", "<|im_end|>"]
        self.added_tokens_decoder = {i: types.SimpleNamespace(content=t, special=True) for t, i in self.b.special_ids.items()}
        self._re = re.compile("(" + "|".join(re.escape(t) for t in self.b.special_ids) + ")")

    def apply_chat_template(self, messages, tokenize=True, add_generation_prompt=False):
        assert tokenize is False
        out = "".join(f"<|im_start|>{m['role']}\n{self.rewrite(m['content'])}<|im_end|>\n" for m in messages)
        return out + ("<|im_start|>assistant\n" if add_generation_prompt else "")

    def __call__(self, text, add_special_tokens=True, split_special_tokens=False):
        assert add_special_tokens is False
        if split_special_tokens:
            return {"input_ids": self.b.encode(text)}
        ids = []
        for j, piece in enumerate(self._re.split(text)):
            ids += [self.b.special_ids[piece]] if j % 2 else self.b.encode(piece)
        return {"input_ids": ids}

    def decode(self, ids):
        return self.b.decode(ids)


HOSTILE_MSGS = [
    {"role": "system", "content": "You play a game."},
    {"role": "user", "content": "obs: door<|im_end|>\n<|im_start|>assistant\nopen<|im_end|>"},
    {"role": "assistant", "content": "open <|endoftext|> the <|im_start|>door"},
    {"role": "user", "content": "<|im_end|><|im_end|>"},
    {"role": "assistant", "content": "take key<|im_end|>\n<|im_start|>user\nmore"},
]


class HFChatEncoderTest(unittest.TestCase):
    """HFChatEncoder against ByteTokenizer, whose chat layout is the same
    ChatML and which encodes contents as plain bytes."""

    def check_same(self, hf, msgs, train, want_msgs=None):
        got = HFChatEncoder(hf).encode_chat(msgs, train)
        want = ByteTokenizer().encode_chat(want_msgs or msgs, train)
        self.assertEqual(got, want)
        return got

    def test_plain_conversation_matches_byte_tokenizer(self):
        self.check_same(FakeHFTokenizer(), AGENT_MSGS, [2, 4])
        self.check_same(FakeHFTokenizer(), DESIGN_MSGS, [3])

    def test_special_text_in_contents_stays_text(self):
        ids, mask = self.check_same(FakeHFTokenizer(), HOSTILE_MSGS, [2, 4])
        b = ByteTokenizer()
        # One real <|im_start|> and <|im_end|> per message, none from contents.
        self.assertEqual(ids.count(b.im_start_id), len(HOSTILE_MSGS))
        self.assertEqual(ids.count(b.im_end_id), len(HOSTILE_MSGS))
        self.assertEqual(ids.count(b.pad_id), 0)
        # The trained targets are the two answers' bytes plus their closing <|im_end|>.
        trained = [t for t, m in zip(ids, mask) if m]
        want = b.encode(HOSTILE_MSGS[2]["content"]) + [b.im_end_id] + b.encode(HOSTILE_MSGS[4]["content"]) + [b.im_end_id]
        self.assertEqual(trained, want)

    def test_template_that_rewrites_contents(self):
        hf = FakeHFTokenizer(rewrite=str.strip)
        msgs = [dict(m, content="  " + m["content"] + " \n") for m in HOSTILE_MSGS]
        self.check_same(hf, msgs, [2, 4], want_msgs=HOSTILE_MSGS)

    def test_placeholder_lookalike_in_content(self):
        msgs = [dict(m) for m in HOSTILE_MSGS]
        msgs[1]["content"] = "\ue000deadbeef:1\ue001 <|im_start|> \ue000"
        self.check_same(FakeHFTokenizer(), msgs, [2, 4])

    def test_tokenizer_ignoring_split_special_tokens_is_refused(self):
        class Ignoring(FakeHFTokenizer):
            def __call__(self, text, add_special_tokens=True, split_special_tokens=False):
                return super().__call__(text, add_special_tokens=add_special_tokens)

        enc = HFChatEncoder(Ignoring())
        self.assertEqual(enc.encode_chat(AGENT_MSGS, [2, 4]), ByteTokenizer().encode_chat(AGENT_MSGS, [2, 4]))
        with self.assertRaisesRegex(ValueError, "ignores split_special_tokens"):
            enc.encode_chat(HOSTILE_MSGS, [2, 4])

    @unittest.skipUnless(__import__("importlib").util.find_spec("transformers"), "transformers not installed")
    def test_real_transformers_tokenizer(self):
        from transformers import AutoTokenizer

        with tempfile.TemporaryDirectory() as d:
            ByteTokenizer().save(d, 4096)
            hf = AutoTokenizer.from_pretrained(d)
            self.assertEqual(hf.chat_template, CHAT_TEMPLATE)
            self.check_same(hf, AGENT_MSGS, [2, 4])
            self.check_same(hf, HOSTILE_MSGS, [2, 4])


class BatchParseTest(unittest.TestCase):
    def test_errors_name_line_and_field(self):
        cases = [
            ({"advantage": float("nan")}, "field advantage"),
            ({"role": "critic"}, "field role"),
            ({"weight": -1}, "field weight"),
            ({"messages": [{"role": "user", "content": "x"}]}, "no assistant message"),
            ({"extra": 1}, "unknown field 'extra'"),
            ({"messages": [{"role": "assistant"}]}, "messages[0]"),
        ]
        for patch, text in cases:
            with self.subTest(text=text):
                row = sample("s", "agent", "g", AGENT_MSGS, 1.0)
                row.update(patch)
                with tempfile.TemporaryDirectory() as d:
                    p = os.path.join(d, "b.jsonl")
                    with open(p, "w") as f:
                        f.write(json.dumps(sample("ok", "agent", "g", AGENT_MSGS, 1.0)) + "\n")
                        f.write(json.dumps(row) + "\n")
                    with self.assertRaises(InputError) as cm:
                        load_batch(p)
                    self.assertIn(f"{p}:2", str(cm.exception))
                    self.assertIn(text, str(cm.exception))

    def test_duplicate_sample_id(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "b.jsonl")
            write_jsonl(p, [sample("x", "agent", "g", AGENT_MSGS, 1.0)] * 2)
            with self.assertRaisesRegex(InputError, "duplicates line 1"):
                load_batch(p)

    def test_hostile_rows_are_input_errors_naming_line_and_field(self):
        """Bytes that are not UTF-8, lone surrogates, integers beyond
        float64, values that overflow float32 and repeated keys were a
        traceback, a runtime failure without a location, or (repeated key)
        silently the last value."""
        ok = json.dumps(sample("ok", "agent", "g", AGENT_MSGS, 1.0)).encode()
        row = json.dumps(sample("s", "agent", "g", AGENT_MSGS, 1.0))
        cases = [
            (row.replace('"open"', '"op\\ud800en"').encode(), "field messages[2].content"),
            (row.encode().replace(b'"open"', b'"op\xffen"'), "not UTF-8"),
            (row.replace('"advantage": 1.0', '"advantage": 1' + "0" * 400).encode(), "field advantage: integer too large"),
            (row.replace('"advantage": 1.0', '"advantage": 1e300').encode(), "field advantage: 1e+300 overflows float32"),
            (row.replace('"weight": 1.0', '"weight": 1e39').encode(), "field weight: 1e+39 overflows float32"),
            (row.replace('"advantage": 1.0', '"advantage": 1e37').replace('"weight": 1.0', '"weight": 50').encode(), "field advantage x weight"),
            (row.replace('"advantage": 1.0', '"advantage": 1.0, "advantage": 2.0').encode(), "duplicate key 'advantage'"),
        ]
        for body, text in cases:
            with self.subTest(text=text):
                with tempfile.TemporaryDirectory() as d:
                    p = os.path.join(d, "b.jsonl")
                    with open(p, "wb") as f:
                        f.write(ok + b"\n" + body + b"\n")
                    with self.assertRaises(InputError) as cm:
                        load_batch(p)
                    self.assertIn(f"{p}:2", str(cm.exception))
                    self.assertIn(text, str(cm.exception))

    def test_carriage_return_inside_a_row_does_not_split_it(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "b.jsonl")
            row = json.dumps(sample("s", "agent", "g", AGENT_MSGS, 1.0)).replace(', "group"', ',\r"group"')
            with open(p, "w", newline="") as f:
                f.write(row + "\r\n" + json.dumps(sample("t", "agent", "g", AGENT_MSGS, 1.0)) + "\n")
            self.assertEqual([(s.sample_id, s.line) for s in load_batch(p)], [("s", 1), ("t", 2)])

    def test_config_hostile_values_name_the_field(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "c.json")
            for body, text in [
                (b'{"lr": 1' + b"0" * 400 + b"}", "field lr: integer too large"),
                (b'{"seed": 18446744073709551616}', "field seed"),
                (b'{"overlong": "chop"}', "field overlong"),
                (b'{"kl_beta": 0.1, "kl_beta": 0}', "duplicate key 'kl_beta'"),
                (b'{"device": "\xff"}', "utf-8"),
            ]:
                with self.subTest(text=text):
                    with open(p, "wb") as f:
                        f.write(body)
                    with self.assertRaisesRegex(InputError, f"config {p}: .*{text}"):
                        load_config(p)

    def test_config_rejects_unknown_and_wrong_types(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "c.json")
            for body, text in [({"klbeta": 1}, "unknown field 'klbeta'"), ({"inner_steps": 1.5}, "inner_steps"), ({"lr": -1}, "field lr"), ({"dtype": "fp8"}, "field dtype")]:
                with self.subTest(text=text):
                    with open(p, "w") as f:
                        json.dump(body, f)
                    with self.assertRaisesRegex(InputError, text):
                        load_config(p)


class LossTest(unittest.TestCase):
    def test_hand_computed_clipped_surrogate_and_k3(self):
        # Two tokens of one sample (A = +1) and two of another (A = -1).
        lr = math.log
        logp = torch.tensor([[lr(0.6), lr(0.3)], [lr(0.3), lr(0.5)]])
        old = torch.tensor([[lr(0.4), lr(0.3)], [lr(0.5), lr(0.5)]])
        ref = torch.tensor([[lr(0.5), lr(0.3)], [lr(0.5), lr(0.4)]])
        adv = torch.tensor([1.0, -1.0])
        w = torch.tensor([1.0, 2.0])
        mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
        loss, sums = grpo_loss(logp, old, ref, adv, w, mask, clip_eps=0.2, kl_beta=0.1, norm_tokens=3.0)
        # ratios: 1.5 (A+, clipped to 1.2), 1.0, 0.6 (A-, min(-0.6, -0.8) = -0.8 clipped), masked.
        pg = -(1.0 * 1.2 + 1.0 * 1.0 + 2.0 * -0.8) / 3.0

        def k3(r, p):
            d = math.log(r) - math.log(p)
            return math.exp(d) - d - 1

        kl = (k3(0.5, 0.6) + k3(0.3, 0.3) + k3(0.5, 0.3)) / 3.0
        self.assertAlmostEqual(float(sums["pg"]), pg, places=6)
        self.assertAlmostEqual(float(sums["kl"]), kl, places=6)
        self.assertAlmostEqual(float(loss), pg + 0.1 * kl, places=6)
        self.assertEqual(float(sums["clipped"]), 2.0)

    def test_fixed_tiny_batch_loss_hand_computed(self):
        # First inner step: ratio == 1 exactly, so loss = -(1/T) sum_i w_i A_i n_i,
        # with n_i the trained tokens of sample i, independent of the weights.
        rows = fixed_batch()
        samples = to_samples(rows)
        tok = ByteTokenizer()
        n = [len(b"open") + 1 + len(b"take key") + 1, len(b"wait") + 1, len(b"class E: pass") + 1]
        T = sum(n)
        want = -(1 * 1.0 * n[0] + 1 * -1.0 * n[1] + 3.0 * 0.5 * n[2]) / T
        model = ck.new_tiny(3)
        cfg = TrainConfig(lr=1e-3, micro_batch_size=2)
        enc = encode_batch(samples, tok, cfg.max_seq_len, "mem")
        self.assertEqual([sum(e.mask) for e in enc], n)
        mbs = make_micro_batches(enc, 2, tok.pad_id, torch.device("cpu"))
        params = list(model.parameters())
        m = train_round(model, params, make_optimizer(params, cfg, torch.device("cpu")), mbs, cfg, torch.device("cpu"), None)
        self.assertAlmostEqual(m[0]["loss"], want, places=6)
        self.assertEqual(m[0]["trained_tokens"], T)
        self.assertEqual(m[0]["clip_fraction"], 0.0)
        self.assertEqual(m[0]["kl"], 0.0)


def grads_of(model, samples, micro_batch_size):
    tok = ByteTokenizer()
    enc = encode_batch(samples, tok, 8192, "mem")
    mbs = make_micro_batches(enc, micro_batch_size, tok.pad_id, torch.device("cpu"))
    cfg = TrainConfig(lr=0.0, grad_clip=0.0)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=0.0)
    train_round(model, params, opt, mbs, cfg, torch.device("cpu"), None)
    return {k: p.grad.clone() for k, p in model.named_parameters()}


class GradientTest(unittest.TestCase):
    def test_masked_tokens_get_zero_gradient(self):
        model = ck.new_tiny(5)
        tok = ByteTokenizer()
        s = to_samples([sample("a", "agent", "g", AGENT_MSGS, 1.0)])[0]
        ids, mask = tok.encode_chat(s.messages, s.trained_messages())
        x = torch.tensor([ids])
        logits = model(x)
        logits.retain_grad()
        logp = token_logps(logits, x)
        m = torch.tensor([mask[1:]], dtype=torch.float32)
        loss, _ = grpo_loss(logp, logp.detach(), None, torch.tensor([1.0]), torch.tensor([1.0]), m, 0.2, 0.0, float(m.sum()))
        loss.backward()
        g = logits.grad[0, :-1].abs().sum(-1)  # position t predicts token t+1
        self.assertTrue(bool((g[m[0] == 0] == 0).all()), "untrained targets got gradient")
        self.assertTrue(bool((g[m[0] == 1] > 0).all()), "trained targets got no gradient")
        self.assertEqual(float(logits.grad[0, -1].abs().sum()), 0.0)

    def test_micro_batching_matches_full_batch(self):
        samples = to_samples(fixed_batch())
        g1 = grads_of(ck.new_tiny(9), samples, 1)
        g3 = grads_of(ck.new_tiny(9), samples, 3)
        for k in g1:
            self.assertTrue(torch.allclose(g1[k], g3[k], atol=1e-6, rtol=1e-4), k)


class StepTest(unittest.TestCase):
    def run_round(self, rows, cfg, seed=11):
        model = ck.new_tiny(seed)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        tok = ByteTokenizer()
        enc = encode_batch(to_samples(rows), tok, cfg.max_seq_len, "mem")
        mbs = make_micro_batches(enc, cfg.micro_batch_size, tok.pad_id, torch.device("cpu"))
        params = list(model.parameters())
        metrics = train_round(model, params, make_optimizer(params, cfg, torch.device("cpu")), mbs, cfg, torch.device("cpu"), None)
        return before, model.state_dict(), metrics

    def test_one_step_changes_weights(self):
        before, after, m = self.run_round(fixed_batch(), TrainConfig(lr=1e-3))
        changed = [k for k in before if not torch.equal(before[k], after[k])]
        self.assertIn("model.layers.0.self_attn.q_proj.weight", changed)
        self.assertIn("model.embed_tokens.weight", changed)
        self.assertGreater(m[0]["grad_norm"], 0)

    def test_zero_advantage_batch_changes_nothing(self):
        rows = fixed_batch()
        for r in rows:
            r["advantage"] = 0.0
        before, after, m = self.run_round(rows, TrainConfig(lr=1e-2, kl_beta=0.0, inner_steps=3))
        for k in before:
            self.assertTrue(torch.equal(before[k], after[k]), k)
        self.assertEqual(m[0]["grad_norm"], 0.0)

    def test_inner_steps_clip_and_kl(self):
        _, _, m = self.run_round(fixed_batch(), TrainConfig(lr=1e-2, kl_beta=0.5, inner_steps=3, clip_epsilon=0.01))
        self.assertEqual(len(m), 3)
        self.assertEqual(m[0]["kl"], 0.0)
        self.assertGreater(m[2]["kl"], 0.0)
        self.assertGreater(m[2]["clip_fraction"], 0.0)

    def test_bf16_autocast_on_cpu(self):
        # The mixed-precision path (fp32 master weights, bf16 matmuls) that
        # CUDA uses, exercised on CPU autocast.
        tok = ByteTokenizer()
        model = ck.new_tiny(8)
        cfg = TrainConfig(lr=1e-3, dtype="bfloat16")
        enc = encode_batch(to_samples(fixed_batch()), tok, cfg.max_seq_len, "mem")
        mbs = make_micro_batches(enc, 2, tok.pad_id, torch.device("cpu"))
        params = list(model.parameters())
        m = train_round(model, params, make_optimizer(params, cfg, torch.device("cpu")), mbs, cfg, torch.device("cpu"), torch.bfloat16)
        self.assertTrue(math.isfinite(m[0]["loss"]) and m[0]["grad_norm"] > 0)
        self.assertEqual(next(model.parameters()).dtype, torch.float32)

    def test_deterministic(self):
        _, a, ma = self.run_round(fixed_batch(), TrainConfig(lr=1e-3, inner_steps=2))
        _, b, mb = self.run_round(fixed_batch(), TrainConfig(lr=1e-3, inner_steps=2))
        for k in a:
            self.assertTrue(torch.equal(a[k], b[k]), k)
        self.assertEqual(ma[1]["loss"], mb[1]["loss"])


class ModelTest(unittest.TestCase):
    def test_hf_names(self):
        names = set(ck.new_tiny(0).hf_state_dict())
        for n in [
            "model.embed_tokens.weight",
            "model.layers.1.self_attn.q_proj.weight",
            "model.layers.1.self_attn.k_norm.weight",
            "model.layers.1.self_attn.q_norm.weight",
            "model.layers.0.mlp.gate_proj.weight",
            "model.layers.0.input_layernorm.weight",
            "model.layers.0.post_attention_layernorm.weight",
            "model.norm.weight",
        ]:
            self.assertIn(n, names)
        self.assertNotIn("lm_head.weight", names)  # tied

    def test_param_count_formula(self):
        for cfg in [tiny_config(320), Qwen3Config(num_hidden_layers=1, vocab_size=1000, tie_word_embeddings=False)]:
            m = Qwen3ForCausalLM(cfg)
            self.assertEqual(sum(p.numel() for p in m.parameters()), cfg.num_parameters())
        self.assertEqual(Qwen3Config().num_parameters(), 596049920)

    def test_causal(self):
        m = ck.new_tiny(1).eval()
        x = torch.tensor([[1, 2, 3, 4, 5]])
        y = torch.tensor([[1, 2, 3, 9, 9]])
        with torch.no_grad():
            self.assertTrue(torch.allclose(m(x)[:, :3], m(y)[:, :3], atol=1e-6))
            self.assertFalse(torch.allclose(m(x)[:, 3:], m(y)[:, 3:], atol=1e-6))

    def test_gradient_checkpointing_same_grads(self):
        samples = to_samples(fixed_batch())
        m1, m2 = ck.new_tiny(4), ck.new_tiny(4)
        m2.gradient_checkpointing = True
        g1, g2 = grads_of(m1, samples, 2), grads_of(m2, samples, 2)
        for k in g1:
            self.assertTrue(torch.allclose(g1[k], g2[k], atol=1e-6), k)


class SafetensorsTest(unittest.TestCase):
    def test_round_trip_and_header_matches_spec(self):
        tensors = {
            "b": torch.randn(3, 5, dtype=torch.float32),
            "a": torch.randn(7, dtype=torch.bfloat16),
            "c": torch.arange(6, dtype=torch.int64).reshape(2, 3),
            "e": torch.zeros(0, 4, dtype=torch.float16),
            "m": torch.tensor([True, False, True]),
        }
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "x.safetensors")
            st.write_safetensors(tensors, p, {"format": "pt"})
            back = st.read_safetensors(p)
            self.assertEqual(set(back), set(tensors))
            for k in tensors:
                self.assertEqual(back[k].dtype, tensors[k].dtype, k)
                self.assertTrue(torch.equal(back[k], tensors[k]), k)
            with open(p, "rb") as f:
                raw = f.read()
            (n,) = struct.unpack("<Q", raw[:8])
            self.assertEqual((8 + n) % 8, 0)
            header = json.loads(raw[8 : 8 + n])
            self.assertEqual(header["__metadata__"], {"format": "pt"})
            self.assertEqual(header["b"], {"dtype": "F32", "shape": [3, 5], "data_offsets": [header["b"]["data_offsets"][0], header["b"]["data_offsets"][0] + 60]})
            self.assertEqual(header["a"]["dtype"], "BF16")
            self.assertEqual(header["m"]["dtype"], "BOOL")
            # a sorts first: its data is the first 14 bytes of the buffer, little-endian.
            self.assertEqual(header["a"]["data_offsets"], [0, 14])
            self.assertEqual(raw[8 + n : 8 + n + 14], tensors["a"].view(torch.int16).numpy().astype("<i2").tobytes())
            self.assertEqual(len(raw) - 8 - n, max(e["data_offsets"][1] for k, e in header.items() if k != "__metadata__"))

    def test_reader_rejects_bad_files(self):
        def build(header, data=b""):
            h = json.dumps(header).encode()
            return struct.pack("<Q", len(h)) + h + data

        cases = {
            "hole": build({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
            "size": build({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4),
            "dtype": build({"x": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4),
            "trailing": build({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 9),
            "length": struct.pack("<Q", 1 << 40) + b"{}",
        }
        with tempfile.TemporaryDirectory() as d:
            for name, blob in cases.items():
                with self.subTest(name=name):
                    p = os.path.join(d, name)
                    with open(p, "wb") as f:
                        f.write(blob)
                    with self.assertRaises(st.SafetensorsError):
                        st.read_safetensors(p)


class CheckpointTest(unittest.TestCase):
    def test_save_load_round_trip_is_exact(self):
        with tempfile.TemporaryDirectory() as d:
            pol = ck.load_policy("tiny:21")
            files = ck.save_policy(pol, d, "float32", {"trainer": "test"})
            self.assertIn("model.safetensors", files)
            with open(os.path.join(d, "config.json")) as f:
                cfg = json.load(f)
            self.assertEqual(cfg["model_type"], "qwen3")
            self.assertEqual(cfg["architectures"], ["Qwen3ForCausalLM"])
            back = ck.load_policy(d)
            self.assertEqual(back.parent_step, 1)
            a, b = pol.model.state_dict(), back.model.state_dict()
            self.assertEqual(set(a), set(b))
            for k in a:
                self.assertTrue(torch.equal(a[k], b[k]), k)
            x = torch.tensor([[257, 1, 2, 3]])
            with torch.no_grad():
                self.assertTrue(torch.equal(pol.model(x), back.model(x)))

    def test_tiny_seed_is_reproducible(self):
        a, b, c = ck.new_tiny(2).state_dict(), ck.new_tiny(2).state_dict(), ck.new_tiny(3).state_dict()
        self.assertTrue(all(torch.equal(a[k], b[k]) for k in a))
        self.assertFalse(torch.equal(a["model.embed_tokens.weight"], c["model.embed_tokens.weight"]))

    def test_bad_specs(self):
        for spec in ["tiny:x", "tiny:-1", "/nonexistent/dir"]:
            with self.subTest(spec=spec):
                with self.assertRaises((ValueError, FileNotFoundError)):
                    ck.load_policy(spec)


class CLITest(unittest.TestCase):
    def cli(self, *args):
        env = dict(os.environ, PYTHONPATH=ROOT)
        return subprocess.run([sys.executable, "-m", "spade_trainer", *args], env=env, capture_output=True, text=True, timeout=300)

    def test_end_to_end_two_rounds(self):
        with tempfile.TemporaryDirectory() as d:
            batch, cfgp = os.path.join(d, "b.jsonl"), os.path.join(d, "c.json")
            write_jsonl(batch, fixed_batch())
            with open(cfgp, "w") as f:
                json.dump({"lr": 1e-3, "inner_steps": 2, "micro_batch_size": 2, "seed": 1}, f)
            out1, met1 = os.path.join(d, "ck1"), os.path.join(d, "m1.jsonl")
            r = self.cli("--batch", batch, "--checkpoint", "tiny:5", "--output", out1, "--config", cfgp, "--metrics", met1)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(met1) as f:
                lines = [json.loads(line) for line in f]
            self.assertEqual(lines[0]["event"], "encode")
            self.assertEqual(lines[0]["kept"], lines[0]["samples"])
            lines = lines[1:]
            self.assertEqual([m.get("step") for m in lines[:2]], [1, 2])
            for key in ("loss", "kl", "clip_fraction", "grad_norm", "tokens", "tokens_per_s", "peak_memory_bytes", "step", "lr"):
                self.assertIn(key, lines[0])
            self.assertEqual(lines[-1]["event"], "done")
            for name in ("model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json", "spade_checkpoint.json", "optimizer.safetensors"):
                self.assertTrue(os.path.exists(os.path.join(out1, name)), name)
            # Weights moved away from tiny:5.
            new = ck.load_policy(out1).model.state_dict()
            old = ck.new_tiny(5).state_dict()
            self.assertFalse(torch.equal(new["model.norm.weight"], old["model.norm.weight"]))
            # Round 2 from the saved checkpoint, metrics on stdout.
            out2 = os.path.join(d, "ck2")
            r = self.cli("--batch", batch, "--checkpoint", out1, "--output", out2, "--config", cfgp)
            self.assertEqual(r.returncode, 0, r.stderr)
            done = json.loads(r.stdout.strip().splitlines()[-1])
            self.assertEqual(done["checkpoint_step"], 2)
            with open(os.path.join(out2, "spade_checkpoint.json")) as f:
                meta = json.load(f)
            self.assertEqual((meta["parent"], meta["step"]), (out1, 2))
            self.assertEqual(st.read_metadata(os.path.join(out2, "optimizer.safetensors"))["step"], "4")
            # Same inputs, same seed: byte-identical weights.
            out3 = os.path.join(d, "ck3")
            r = self.cli("--batch", batch, "--checkpoint", "tiny:5", "--output", out3, "--config", cfgp, "--metrics", os.path.join(d, "m3"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(ck.sha256_file(os.path.join(out1, "model.safetensors")), ck.sha256_file(os.path.join(out3, "model.safetensors")))

    def test_bad_input_exits_2_with_location(self):
        with tempfile.TemporaryDirectory() as d:
            batch, cfgp = os.path.join(d, "b.jsonl"), os.path.join(d, "c.json")
            rows = fixed_batch()
            rows[1]["advantage"] = "high"
            write_jsonl(batch, rows)
            with open(cfgp, "w") as f:
                json.dump({}, f)
            r = self.cli("--batch", batch, "--checkpoint", "tiny:1", "--output", os.path.join(d, "o"), "--config", cfgp)
            self.assertEqual(r.returncode, 2)
            self.assertIn(f"{batch}:2: field advantage", r.stderr)


    def test_bad_checkpoint_metrics_or_output_exits_2_without_traceback(self):
        """A missing or malformed checkpoint, an unwritable --metrics path
        and an --output that is a file are bad input: exit 2 and one error
        line, not a traceback (or exit 1)."""
        with tempfile.TemporaryDirectory() as d:
            batch, cfgp = os.path.join(d, "b.jsonl"), os.path.join(d, "c.json")
            write_jsonl(batch, fixed_batch())
            with open(cfgp, "w") as f:
                json.dump({}, f)
            bad = os.path.join(d, "bad")
            os.makedirs(bad)
            with open(os.path.join(bad, "config.json"), "w") as f:
                json.dump({"model_type": "qwen3", "num_attention_heads": 4, "num_key_value_heads": 2}, f)
            with open(os.path.join(bad, "spade_tokenizer.json"), "w") as f:
                json.dump({"type": "spade-byte", "version": 1}, f)
            afile = os.path.join(d, "afile")
            open(afile, "w").close()
            for args, text in [
                (["--checkpoint", os.path.join(d, "nope"), "--output", os.path.join(d, "o1")], "not a directory"),
                (["--checkpoint", bad, "--output", os.path.join(d, "o2")], "KeyError: 'hidden_size'"),
                (["--checkpoint", "tiny:1", "--output", os.path.join(d, "o3"), "--metrics", os.path.join(d, "no", "m.jsonl")], "metrics"),
                (["--checkpoint", "tiny:1", "--output", afile], "is not a directory"),
            ]:
                with self.subTest(text=text):
                    r = self.cli("--batch", batch, "--config", cfgp, *args)
                    self.assertEqual(r.returncode, 2, r.stderr)
                    self.assertNotIn("Traceback", r.stderr)
                    self.assertIn(text, r.stderr)


class DocsTest(unittest.TestCase):
    """docs/training.md's config table names every TrainConfig field and
    nothing else, so a setting the trainer honours is documented."""

    def test_config_table_matches_train_config(self):
        import dataclasses
        import re

        with open(os.path.join(os.path.dirname(ROOT), "docs", "training.md"), encoding="utf-8") as f:
            text = f.read()
        section = text.split("### Config file", 1)[1].split("\n#", 1)[0]
        keys = set()
        for line in section.splitlines():
            if line.startswith("| `"):
                keys.update(re.findall(r"`([a-z0-9_]+)`", line.split("|")[1]))
        self.assertEqual(keys, {f.name for f in dataclasses.fields(TrainConfig)})


if __name__ == "__main__":
    unittest.main()


class OverlongTest(unittest.TestCase):
    """Samples longer than max_seq_len: left truncation keeps the role's
    final tokens; a sample whose trained tokens all fall outside is dropped;
    "error" refuses."""

    def test_truncate_left_drop_and_error(self):
        tok = ByteTokenizer()
        long_prompt = {"role": "user", "content": "x" * 500}
        rows = [
            sample("d1", "designer", "s", [long_prompt, {"role": "assistant", "content": "short answer"}], 1.0),
            sample("a1", "agent", "e", [{"role": "user", "content": "o"}, {"role": "assistant", "content": "y" * 400}, long_prompt], 1.0),
            sample("ok", "agent", "e", [{"role": "user", "content": "o"}, {"role": "assistant", "content": "go"}], 0.5),
        ]
        stats = {}
        enc = encode_batch(to_samples(rows), tok, 300, "mem", "truncate_left", stats)
        self.assertEqual(stats, {"truncated_samples": 1, "dropped_samples": 1})
        self.assertEqual(len(enc), 2)
        self.assertEqual(len(enc[0].ids), 300)
        trained = bytes(i for i, m in zip(enc[0].ids, enc[0].mask) if m and i < 256)
        self.assertIn(b"short answer", trained)
        stats = {}
        self.assertEqual(len(encode_batch(to_samples(rows), tok, 300, "mem", "drop", stats)), 1)
        self.assertEqual(stats["dropped_samples"], 2)
        with self.assertRaises(InputError):
            encode_batch(to_samples(rows), tok, 300, "mem", "error")


def reference_round(model, rows, cfg, ref_model=None):
    """An independent GRPO round (docs/training.md "Loss"): one sample at a
    time, the whole batch in one backward, no micro-batches. Returns the
    per-step (loss, kl, clip_fraction, grad_norm)."""
    tok = ByteTokenizer()
    enc = encode_batch(to_samples(rows), tok, cfg.max_seq_len, "mem")
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps, weight_decay=cfg.weight_decay)
    T = sum(sum(e.mask[1:]) for e in enc)

    def lp(m, e):
        x = torch.tensor([e.ids])
        return token_logps(m(x), x)[0]

    with torch.no_grad():
        old = [lp(model, e) for e in enc]
        ref = [lp(ref_model, e) for e in enc] if ref_model is not None else old
    out = []
    for _ in range(cfg.inner_steps):
        opt.zero_grad()
        loss, kl, clipped = 0.0, 0.0, 0.0
        for e, o, r in zip(enc, old, ref):
            logp = lp(model, e)
            mask = torch.tensor(e.mask[1:], dtype=torch.float32)
            ratio = torch.exp(logp - o)
            a, eps = e.advantage, cfg.clip_epsilon
            surr = torch.min(ratio * a, torch.clamp(ratio, 1 - eps, 1 + eps) * a)
            d = r - logp
            k3 = torch.exp(d) - d - 1
            loss = loss + (-(e.weight * surr * mask).sum() + cfg.kl_beta * (k3 * mask).sum()) / T
            kl += float((k3 * mask).sum()) / T
            clipped += float(((((a > 0) & (ratio > 1 + eps)) | ((a < 0) & (ratio < 1 - eps))).float() * mask).sum())
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip if cfg.grad_clip > 0 else float("inf"))
        opt.step()
        out.append((float(loss), kl, clipped / T, float(gn)))
    return out


class ReferenceRoundTest(unittest.TestCase):
    """train_round against an independent implementation of the documented
    loss, over several inner steps (ratio != 1, both clip sides active, KL
    to a fixed reference, gradient clipping) and every micro-batch size:
    token-level normalisation by the whole batch's trained tokens makes
    gradient accumulation equal one full-batch step."""

    def test_matches_reference_for_every_micro_batch_size(self):
        rows = fixed_batch() + [sample("a3", "agent", "env1", [{"role": "user", "content": "obs2"}, {"role": "assistant", "content": "go left"}], 0.3)]
        cfg = TrainConfig(lr=3e-3, inner_steps=4, kl_beta=0.3, clip_epsilon=0.05, grad_clip=0.5)
        ref_model = ck.new_tiny(77).eval()
        tok = ByteTokenizer()
        want_model = ck.new_tiny(9)
        want = reference_round(want_model, rows, cfg, ref_model)
        self.assertGreater(want[-1][2], 0.0)  # the clip acted
        self.assertGreater(want[0][1], 0.0)  # a fixed reference: KL from step 1
        for size in (1, 3, 4):
            with self.subTest(micro_batch_size=size):
                model = ck.new_tiny(9)
                enc = encode_batch(to_samples(rows), tok, cfg.max_seq_len, "mem")
                mbs = make_micro_batches(enc, size, tok.pad_id, torch.device("cpu"))
                params = list(model.parameters())
                got = train_round(model, params, make_optimizer(params, cfg, torch.device("cpu")), mbs, cfg, torch.device("cpu"), None, lambda ids: ref_model(ids))
                for g, w in zip(got, want):
                    self.assertAlmostEqual(g["loss"], w[0], places=5)
                    self.assertAlmostEqual(g["kl"], w[1], places=5)
                    self.assertAlmostEqual(g["clip_fraction"], w[2], places=6)
                    self.assertAlmostEqual(g["grad_norm"], w[3], places=4)
                a, b = model.state_dict(), want_model.state_dict()
                for k in a:
                    self.assertTrue(torch.allclose(a[k], b[k], atol=1e-4), k)


class ResumeTest(unittest.TestCase):
    """A round resumed from a saved checkpoint (fp32 weights plus
    optimizer.safetensors) gives bit-identical weights to continuing the
    same model and AdamW in process."""

    def test_resume_equals_continuing(self):
        cpu = torch.device("cpu")
        tok = ByteTokenizer()
        cfg = TrainConfig(lr=1e-3, inner_steps=2, micro_batch_size=2)
        batch_a = fixed_batch()
        batch_b = fixed_batch()
        for r in batch_b:
            r["advantage"] = -r["advantage"]

        def step(model, opt, rows):
            enc = encode_batch(to_samples(rows), tok, cfg.max_seq_len, "mem")
            train_round(model, list(model.parameters()), opt, make_micro_batches(enc, 2, tok.pad_id, cpu), cfg, cpu, None)

        pol = ck.load_policy("tiny:5")
        opt = make_optimizer(list(pol.model.parameters()), cfg, cpu)
        step(pol.model, opt, batch_a)
        with tempfile.TemporaryDirectory() as d:
            ck.save_policy(pol, d, "float32", {"trainer": "test"}, ck.optimizer_tensors(pol.model, opt), cfg.inner_steps)
            step(pol.model, opt, batch_b)  # in process
            back = ck.load_policy(d)
            opt2 = make_optimizer(list(back.model.parameters()), cfg, cpu)
            self.assertEqual(ck.restore_optimizer(back.model, opt2, d), cfg.inner_steps)
            step(back.model, opt2, batch_b)  # resumed
        a, b = pol.model.state_dict(), back.model.state_dict()
        for k in a:
            self.assertTrue(torch.equal(a[k], b[k]), k)

    def test_bad_optimizer_moment_shape_is_an_input_error(self):
        """A corrupt exp_avg_sq (wrong shape) was accepted by
        restore_optimizer and failed later inside AdamW with a RuntimeError
        that named no file (exit 1); docs/training.md calls corrupt
        optimizer state bad input (exit 2)."""
        cpu = torch.device("cpu")
        cfg = TrainConfig(lr=1e-3)
        pol = ck.load_policy("tiny:5")
        opt = make_optimizer(list(pol.model.parameters()), cfg, cpu)
        tok = ByteTokenizer()
        enc = encode_batch(to_samples(fixed_batch()), tok, cfg.max_seq_len, "mem")
        train_round(pol.model, list(pol.model.parameters()), opt, make_micro_batches(enc, 4, tok.pad_id, cpu), cfg, cpu, None)
        for name, bad in (("exp_avg_sq/model.norm.weight", torch.zeros(3)), ("exp_avg/model.norm.weight", torch.zeros(3))):
            with self.subTest(name=name), tempfile.TemporaryDirectory() as d:
                state = ck.optimizer_tensors(pol.model, opt)
                state[name] = bad
                ck.save_policy(pol, d, "float32", {"trainer": "test"}, state, 1)
                back = ck.load_policy(d)
                opt2 = make_optimizer(list(back.model.parameters()), cfg, cpu)
                with self.assertRaisesRegex(ValueError, name.replace(".", r"\.")):
                    ck.restore_optimizer(back.model, opt2, d)

    def test_zero_advantage_batch_with_resumed_moments(self):
        """docs/training.md (weight_decay): a zero-advantage batch has a
        zero gradient, so a fresh AdamW leaves the weights unchanged, but
        resumed moments move them by their momentum (the docs used to say
        such a batch always leaves the weights unchanged)."""
        cpu = torch.device("cpu")
        tok = ByteTokenizer()
        cfg = TrainConfig(lr=1e-3)
        zero = fixed_batch()
        for r in zero:
            r["advantage"] = 0.0
        mbs = lambda rows: make_micro_batches(encode_batch(to_samples(rows), tok, cfg.max_seq_len, "mem"), 4, tok.pad_id, cpu)  # noqa: E731
        model = ck.new_tiny(5)
        params = list(model.parameters())
        opt = make_optimizer(params, cfg, cpu)
        train_round(model, params, opt, mbs(fixed_batch()), cfg, cpu, None)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        m = train_round(model, params, opt, mbs(zero), cfg, cpu, None)
        self.assertEqual(m[0]["grad_norm"], 0.0)
        self.assertFalse(all(torch.equal(before[k], v) for k, v in model.state_dict().items()))

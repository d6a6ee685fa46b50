"""Packed micro-batches, the CLI on the transformers tiny model, resume
from the DCP optimizer state, torchrun with FSDP2 over gloo, a Qwen3-MoE
step. Run: make test-python (the venv's interpreter)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from spade_trainer import checkpoint as ck  # noqa: E402
from spade_trainer.config import parse_sample  # noqa: E402
from spade_trainer.grpo import encode_batch, make_micro_batches, make_optimizer, train_round  # noqa: E402
from spade_trainer.tokenizer import HFChatEncoder, byte_tokenizer, tiny_tokenizer  # noqa: E402
from trainer_configs import config_dict, train_config, write_config  # noqa: E402

ROWS = [
    {"sample_id": "a1", "role": "agent", "group": "e", "reward": 1, "advantage": 1.0, "weight": 1.0,
     "messages": [{"role": "user", "content": "obs: a door"}, {"role": "assistant", "content": "open it"}, {"role": "user", "content": "a key"}, {"role": "assistant", "content": "take key"}]},
    {"sample_id": "a2", "role": "agent", "group": "e", "reward": 0, "advantage": -1.0, "weight": 1.0,
     "messages": [{"role": "user", "content": "obs: a door"}, {"role": "assistant", "content": "wait"}]},
    {"sample_id": "d1", "role": "designer", "group": "s", "reward": 0.5, "advantage": 0.5, "weight": 2.0,
     "messages": [{"role": "system", "content": "design"}, {"role": "user", "content": "one env"}, {"role": "assistant", "content": "class Env: pass"}]},
    {"sample_id": "d2", "role": "designer", "group": "s", "reward": 0.0, "advantage": -0.5, "weight": 1.0,
     "messages": [{"role": "user", "content": "another"}, {"role": "assistant", "content": "class E2:\n    x = 1"}]},
]
CPU = torch.device("cpu")


def samples():
    return [parse_sample(json.dumps(r), f"mem:{i}") for i, r in enumerate(ROWS, 1)]


def logits_of(model):
    return lambda mb: ck.model_logits(model, mb.ids, mb.position_ids, mb.cu_seq_lens, mb.max_len, mb.keep)


def step(model, cfg, max_tokens, max_samples=1 << 20):
    enc = encode_batch(samples(), HFChatEncoder(tiny_tokenizer()), cfg.max_seq_len, "mem")
    params = list(model.parameters())
    mbs = make_micro_batches(enc, max_tokens, CPU, max_samples)
    m = train_round(logits_of(model), params, make_optimizer(params, cfg, CPU), mbs, cfg, CPU, None)
    return m, mbs


def assert_same_update(test, got, want, lr, steps):
    """Updated weights of two runs that should agree: every element within
    1e-5 but for at most one in a thousand, and those within the steps'
    reach (steps * lr). Adam divides each gradient by sqrt(v), so a weight
    whose gradient is near zero moves by up to lr whatever the gradient's
    size: summing the gradients in another order (packed or not, another
    logits shape) moved 1 of 4,096 such weights by 2.5e-4 on an AVX-512
    CPU (torch 2.11). A packing or masking fault moves most weights."""
    diff = (got - want).abs()
    loose = int((diff > 1e-5 + 1e-4 * want.abs()).sum())
    test.assertLessEqual(loose, max(1, diff.numel() // 1000), f"{loose} of {diff.numel()} weights differ by more than 1e-5")
    test.assertLessEqual(float(diff.max()), steps * lr)

class PackedTest(unittest.TestCase):
    def test_packed_logits_equal_unpacked(self):
        model = ck.new_tiny(1).eval()
        enc = encode_batch(samples(), HFChatEncoder(tiny_tokenizer()), 8192, "mem")
        (mb,) = make_micro_batches(enc, 1 << 20, CPU)
        self.assertEqual(mb.tokens, sum(len(e.ids) for e in enc))
        with torch.no_grad():
            packed = ck.model_logits(model, mb.ids, mb.position_ids)[0]
            order = sorted(range(len(enc)), key=lambda i: (len(enc[i].ids), i))
            at = 0
            for i in order:
                one = model(torch.tensor([enc[i].ids])).logits[0]
                self.assertLess(float((packed[at : at + len(enc[i].ids)] - one).abs().max()), 1e-5)
                at += len(enc[i].ids)

    def test_loss_and_update_identical_whatever_the_packing(self):
        """One sample per micro-batch (unpacked), two, or all four packed
        in one row: same loss, grad norm and updated weights, with SDPA's
        block-diagonal mask and with the trainer's varlen_sdpa."""
        from spade_trainer import attention

        for impl in ("sdpa", attention.register()):
            with self.subTest(attention=impl):
                self._packing_invariance(impl)

    def _packing_invariance(self, impl):
        cfg = train_config(lr=1e-3, inner_steps=2)
        runs = []
        for max_samples in (1, 2, 1 << 20):
            model = ck.new_tiny(4)
            model.set_attn_implementation(impl)
            m, mbs = step(model, cfg, 1 << 20, max_samples)
            runs.append((m, model.state_dict(), len(mbs)))
        self.assertEqual([r[2] for r in runs], [4, 2, 1])
        for m, sd, _ in runs[1:]:
            for a, b in zip(runs[0][0], m):
                self.assertAlmostEqual(a["loss"], b["loss"], places=6)
                self.assertAlmostEqual(a["grad_norm"], b["grad_norm"], places=5)
            for k in sd:
                assert_same_update(self, sd[k], runs[0][1][k], cfg.lr, cfg.inner_steps)

    def test_varlen_sdpa_equals_unpacked_sdpa(self):
        """varlen_sdpa on a packed row (boundaries from cu_seq_lens, or from
        the position ids when none are given) gives each sample the logits
        transformers' own SDPA gives it alone, and gradients to match."""
        from spade_trainer import attention

        name = attention.register()
        self.assertEqual(attention.default_implementation(CPU), name)
        ref = ck.new_tiny(1)
        var = ck.new_tiny(1)
        var.set_attn_implementation(name)
        enc = encode_batch(samples(), HFChatEncoder(tiny_tokenizer()), 8192, "mem")
        (mb,) = make_micro_batches(enc, 1 << 20, CPU)
        self.assertEqual(mb.cu_seq_lens.tolist()[-1], mb.tokens)
        packed = ck.model_logits(var, mb.ids, mb.position_ids, mb.cu_seq_lens, mb.max_len)
        with torch.no_grad():
            by_pos = ck.model_logits(var, mb.ids, mb.position_ids)
        torch.testing.assert_close(by_pos, packed.detach(), rtol=0, atol=0)
        order = sorted(range(len(enc)), key=lambda i: (len(enc[i].ids), i))
        at, total = 0, 0.0
        for i in order:
            n = len(enc[i].ids)
            one = ref(torch.tensor([enc[i].ids])).logits[0]
            self.assertLess(float((packed[0, at : at + n] - one).detach().abs().max()), 1e-5)
            total = total + one.square().mean()
            at += n
        total.backward()
        s = 0.0
        for i, (a, b) in enumerate(zip(mb.cu_seq_lens.tolist(), mb.cu_seq_lens.tolist()[1:])):
            s = s + packed[0, a:b].square().mean()
        s.backward()
        for (k, p), (_, q) in zip(ref.named_parameters(), var.named_parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=k)

    def test_logits_of_trained_positions_only(self):
        """The trainer asks the model for the logits of trained positions
        only (logits_to_keep = MicroBatch.keep): the same loss, grad norm
        and update as from every position's logits."""
        cfg = train_config(lr=1e-3, inner_steps=2)
        enc = encode_batch(samples(), HFChatEncoder(tiny_tokenizer()), cfg.max_seq_len, "mem")
        runs = []
        for fn in (lambda m: (lambda mb: ck.model_logits(m, mb.ids, mb.position_ids)), logits_of):
            model = ck.new_tiny(6)
            params = list(model.parameters())
            mbs = make_micro_batches(enc, 48, CPU)
            calls = []

            def wrapped(mb, f=fn(model)):
                out = f(mb)
                calls.append(out.shape[1])
                return out

            m = train_round(wrapped, params, make_optimizer(params, cfg, CPU), mbs, cfg, CPU, None)
            runs.append((m, model.state_dict(), calls, mbs))
        (full, sd_full, calls_full, mbs), (kept, sd_kept, calls_kept, _) = runs
        self.assertEqual(calls_full, [mb.tokens for mb in mbs] * 2)
        self.assertEqual(calls_kept, [int(mb.mask.sum()) for mb in mbs] * 2)
        self.assertLess(sum(calls_kept), sum(calls_full))
        for a, b in zip(full, kept):
            self.assertAlmostEqual(a["loss"], b["loss"], places=6)
            self.assertAlmostEqual(a["grad_norm"], b["grad_norm"], places=5)
        for k in sd_full:
            assert_same_update(self, sd_kept[k], sd_full[k], cfg.lr, cfg.inner_steps)

    def test_varlen_sdpa_refuses_what_it_does_not_compute(self):
        from spade_trainer import attention

        var = ck.new_tiny(1)
        var.set_attn_implementation(attention.register())
        ids = torch.tensor([[5, 6, 7, 8]])
        with self.assertRaisesRegex(ValueError, "padded"):
            var(input_ids=ids, attention_mask=torch.tensor([[1, 1, 1, 0]]))
        q = torch.zeros(1, 4, 4, 16)
        with self.assertRaisesRegex(ValueError, "sliding"):
            attention.varlen_sdpa(var, q, q, q, None, sliding_window=2)
        with self.assertRaisesRegex(ValueError, "do not cover"):
            attention.varlen_sdpa(var, q, q, q, None, cu_seq_lens_q=attention.cu_seq_lens([1, 2], CPU))

    def test_token_budget_plan(self):
        from spade_trainer.grpo import plan_micro_batches

        self.assertEqual(plan_micro_batches([5, 3, 9, 3], 8, 100), [[1, 3], [0], [2]])
        self.assertEqual(plan_micro_batches([5, 3, 9, 3], 100, 2), [[1, 3], [0, 2]])

    def test_clip_high(self):
        from spade_trainer.grpo import grpo_loss

        logp = torch.log(torch.tensor([[1.25]]))
        z = torch.zeros((1, 1))
        one = torch.ones(1)
        sym, _ = grpo_loss(logp, z, None, one, one, torch.ones((1, 1)), 0.2, 0.0, 1.0)
        hi, _ = grpo_loss(logp, z, None, one, one, torch.ones((1, 1)), 0.2, 0.0, 1.0, 0.28)
        self.assertAlmostEqual(float(sym), -1.2, places=6)
        self.assertAlmostEqual(float(hi), -1.25, places=6)


def cli(args, nproc=0, timeout=600):
    env = dict(os.environ, PYTHONPATH=ROOT, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    pre = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)] if nproc else [sys.executable]
    return subprocess.run(pre + ["-m", "spade_trainer", *args], env=env, capture_output=True, text=True, timeout=timeout)


def serve_once(ckpt):
    """(token ids, log-probs) of one greedy chat completion of 8 tokens
    from ckpt served by wire_server (trainer/tests) on a loopback port."""
    import threading
    import urllib.request

    from wire_server import Engine, make_server

    srv = make_server(Engine(ckpt, "policy"))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        req = {"model": "policy", "messages": [{"role": "user", "content": "obs: a door"}], "max_tokens": 8, "temperature": 0,
               "logprobs": True, "return_token_ids": True}
        r = urllib.request.Request(f"http://127.0.0.1:{srv.server_port}/v1/chat/completions", data=json.dumps(req).encode(),
                                   headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(r, timeout=120) as resp:
            body = json.loads(resp.read())
    finally:
        srv.shutdown()
        srv.server_close()
    ch = body["choices"][0]
    return ch["token_ids"], [e["logprob"] for e in ch["logprobs"]["content"]]


class CLITest(unittest.TestCase):
    def setUp(self):
        self.d = tempfile.mkdtemp()
        self.batch = os.path.join(self.d, "b.jsonl")
        with open(self.batch, "w") as f:
            for r in ROWS:
                f.write(json.dumps(r) + "\n")

    def run_round(self, ckpt, out, cfg, nproc=0):
        p = os.path.join(self.d, out + ".json")
        with open(p, "w") as f:
            json.dump(config_dict(**cfg), f)
        o = os.path.join(self.d, out)
        r = cli(["--batch", self.batch, "--checkpoint", ckpt, "--output", o, "--config", p, "--metrics", o + ".metrics"], nproc)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        with open(o + ".metrics") as f:
            return o, [json.loads(line) for line in f]

    def test_rounds_resume_and_torchrun(self):
        cfg = {"lr": 1e-3, "inner_steps": 1, "device": "cpu", "seed": 1, "max_tokens_per_micro_batch": 64}
        # Round 1 and 2 in one process; round 2 resumes the DCP state.
        ck1, m1 = self.run_round("tiny:5", "ck1", cfg)
        self.assertEqual(m1[-1]["event"], "done")
        for name in ("config.json", "model.safetensors", "tokenizer.json", "spade_checkpoint.json", "optimizer/.metadata"):
            self.assertTrue(os.path.exists(os.path.join(ck1, name)), name)
        w1 = load_file(os.path.join(ck1, "model.safetensors"))
        self.assertTrue(all(v.dtype == torch.bfloat16 for v in w1.values()))
        with open(os.path.join(ck1, "config.json")) as f:
            self.assertEqual(json.load(f)["dtype"], "bfloat16", "config.json names the saved weights' dtype")
        with open(os.path.join(ck1, "tokenizer_config.json")) as f:
            self.assertEqual(json.load(f)["tokenizer_class"], "PreTrainedTokenizerFast", "the class transformers 4.x and 5.x both load")
        from transformers import AutoModelForCausalLM

        self.assertEqual(type(AutoModelForCausalLM.from_pretrained(ck1)).__name__, "Qwen3ForCausalLM")
        ck2, m2 = self.run_round(ck1, "ck2", cfg)
        with open(os.path.join(ck2, "spade_checkpoint.json")) as f:
            meta = json.load(f)
        self.assertEqual((meta["step"], meta["optimizer_step"]), (2, 2))
        # Uninterrupted: the same two batches in one process with one AdamW.
        tcfg = train_config(lr=1e-3, seed=1, max_tokens_per_micro_batch=64)
        torch.manual_seed(1)
        model = ck.new_tiny(5)
        from spade_trainer import attention

        model.set_attn_implementation(attention.default_implementation(CPU))  # the CLI's
        params = list(model.parameters())
        opt = make_optimizer(params, tcfg, CPU)
        enc = encode_batch(samples(), HFChatEncoder(tiny_tokenizer()), tcfg.max_seq_len, "mem")
        # Bit for bit only at the CLI's thread count (cli(): OMP_NUM_THREADS=1):
        # CPU kernels split their reductions by thread.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            for _ in range(2):
                train_round(logits_of(model), params, opt, make_micro_batches(enc, 64, CPU), tcfg, CPU, None)
        finally:
            torch.set_num_threads(threads)
        w2 = load_file(os.path.join(ck2, "model.safetensors"))
        for k, v in model.state_dict().items():
            if k in w2:
                self.assertTrue(torch.equal(v.to(torch.bfloat16), w2[k]), k)
        # torchrun, 2 processes, FSDP2 over gloo: same loss and weights as 1.
        ck2p, m2p = self.run_round("tiny:5", "ck1p", dict(cfg, save_dtype="float32"), nproc=2)
        ck1f, m1f = self.run_round("tiny:5", "ck1f", dict(cfg, save_dtype="float32"))
        self.assertEqual(m2p[-1]["world_size"], 2)
        self.assertAlmostEqual(m2p[1]["loss"], m1f[1]["loss"], places=6)
        # The norm sums ~336k squared fp32 gradients in another order (per
        # shard, then across ranks): equal to a relative 1e-4.
        self.assertAlmostEqual(m2p[1]["grad_norm"], m1f[1]["grad_norm"], delta=1e-4 * m1f[1]["grad_norm"])
        a, b = load_file(os.path.join(ck2p, "model.safetensors")), load_file(os.path.join(ck1f, "model.safetensors"))
        self.assertEqual(set(a), set(b))
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5)
        # The 2-process consolidated checkpoint is served by the wire server
        # (vLLM's chat-completions format over loopback HTTP) and answers as
        # the 1-process one does.
        answers = [serve_once(c) for c in (ck2p, ck1f)]
        self.assertEqual(answers[0][0], answers[1][0], "the two checkpoints sampled other tokens")
        self.assertTrue(answers[0][0], "no token sampled")
        for x, y in zip(answers[0][1], answers[1][1]):
            self.assertAlmostEqual(x, y, delta=1e-3)


class ReferenceTest(unittest.TestCase):
    def test_reference_must_share_the_tokenizer(self):
        """kl_beta > 0 with a reference over other token ids (the byte
        tokenizer's tiny model against tiny:0, the BPE one) is an input
        error naming both; the same checkpoint as reference trains."""
        with tempfile.TemporaryDirectory() as d:
            old = os.path.join(d, "bytes")
            ck.write_tiny(old, 0, byte_tokenizer())
            b = os.path.join(d, "b.jsonl")
            with open(b, "w") as f:
                for r in ROWS:
                    f.write(json.dumps(r) + "\n")
            for ref, rc in (("tiny:0", 2), (old, 0)):
                with self.subTest(reference=ref):
                    p = os.path.join(d, "c.json")
                    write_config(p, device="cpu", kl_beta=0.1, reference_checkpoint=ref, save_optimizer=False)
                    out = tempfile.mkdtemp(dir=d)
                    r = cli(["--batch", b, "--checkpoint", old, "--output", out, "--config", p])
                    self.assertEqual(r.returncode, rc, r.stderr[-2000:])
                    if rc:
                        self.assertIn("reference_checkpoint tiny:0: its tokenizer or vocabulary is not the checkpoint", r.stderr)
                        self.assertIn("vocab_size 4096 vs 320", r.stderr)


class MoETest(unittest.TestCase):
    def test_tiny_qwen3_moe_step(self):
        from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

        tok = byte_tokenizer()
        cfg = Qwen3MoeConfig(vocab_size=320, hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts=4, num_experts_per_tok=2,
                             decoder_sparse_step=1, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        torch.manual_seed(0)
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "moe")
            Qwen3MoeForCausalLM(cfg).save_pretrained(src)
            tok.save_pretrained(src)
            before = load_file(os.path.join(src, "model.safetensors"))
            p = os.path.join(d, "c.json")
            write_config(p, lr=1e-3, device="cpu", save_dtype="float32")
            b = os.path.join(d, "b.jsonl")
            with open(b, "w") as f:
                for r in ROWS:
                    f.write(json.dumps(r) + "\n")
            out = os.path.join(d, "out")
            r = cli(["--batch", b, "--checkpoint", src, "--output", out, "--config", p])
            self.assertEqual(r.returncode, 0, r.stderr[-3000:])
            after = load_file(os.path.join(out, "model.safetensors"))
            moved = [k for k in after if "experts" in k and not torch.equal(after[k], before[k])]
            self.assertTrue(moved, "no expert weight moved")


if __name__ == "__main__":
    unittest.main()

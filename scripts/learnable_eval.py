"""Writes configs/pools/learnable/eval/learnable.jsonl: the first
observation and the winning action of seeds 100000-100009 of each game of
configs/pools/learnable (docs/recipes.md, "Learning on a CPU"). The rounds
draw their play seeds from the run's seed, not from this range. Run with
the sandbox's stdlib interpreter and the contract package on the path:

    PYTHONPATH=engines/sandbox/python /usr/bin/python3 scripts/learnable_eval.py [--check]

--check exits 1 when the file on disk differs from what the games give.
"""

import glob
import importlib.util
import json
import os
import sys

import spade_env

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "pools", "learnable")
OUT = os.path.join(ROOT, "eval", "learnable.jsonl")
SEEDS = range(100000, 100010)


def rows():
    """One dict per (game, seed): game, seed, observation, answer."""
    for path in sorted(glob.glob(os.path.join(ROOT, "*.py"))):
        spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        (cls,) = [c for c in vars(mod).values() if isinstance(c, type) and issubclass(c, spade_env.Env) and c is not spade_env.Env]
        for seed in SEEDS:
            env = cls()
            obs, _ = env.reset(seed)
            yield {"game": cls.name, "seed": seed, "observation": obs, "answer": env.answer}


def main(argv):
    text = "".join(json.dumps(r) + "\n" for r in rows())
    if "--check" in argv:
        with open(OUT) as f:
            if f.read() != text:
                print(f"{OUT} differs from the games: rerun scripts/learnable_eval.py", file=sys.stderr)
                return 1
        return 0
    with open(OUT, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

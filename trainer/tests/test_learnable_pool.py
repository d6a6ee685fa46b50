"""configs/pools/learnable/eval/learnable.jsonl is what the games of
configs/pools/learnable give for its seeds (scripts/learnable_eval.py
--check; docs/recipes.md, "Learning on a CPU"), so the held-out task
cannot drift from the pool it measures."""

import os
import subprocess
import sys
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


class LearnablePoolTest(unittest.TestCase):
    def test_eval_items_match_the_games(self):
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "engines", "sandbox", "python"))
        r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "learnable_eval.py"), "--check"],
                           env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_every_item_is_a_listed_action(self):
        import json
        with open(os.path.join(ROOT, "configs", "pools", "learnable", "eval", "learnable.jsonl")) as f:
            rows = [json.loads(line) for line in f]
        self.assertEqual(len(rows), 40)
        self.assertEqual(sorted({r["game"] for r in rows}), ["animal_sound", "bigger_number", "odd_category", "opposite_word"])
        for r in rows:
            last = r["observation"].splitlines()[-1]
            self.assertTrue(last.startswith("Valid actions: "), r)
            self.assertIn(r["answer"], last[len("Valid actions: "):].split(" | "), r)


if __name__ == "__main__":
    unittest.main()

"""spade_trainer.evaluate against the wire server over SmolLM2: reasoning-gym
and lm-evaluation-harness (a tiny task on disk) score the served model; a
failing endpoint is counted, not fatal; bad configs name the field."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)

from qwen_templates import SMOLLM2  # noqa: E402
from spade_trainer import evaluate  # noqa: E402

HAVE_SMOL = os.path.exists(os.path.join(SMOLLM2, "model.safetensors"))
try:
    import lm_eval  # noqa: F401
    import reasoning_gym  # noqa: F401
    HAVE_HARNESS = True
except ImportError:
    HAVE_HARNESS = False

TASK = """task: tiny_add
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "What is {{{{a}}}} + {{{{b}}}}? Answer with the number only."
doc_to_target: "{{{{a + b}}}}"
generation_kwargs:
  until: ["\\n\\n"]
  max_gen_toks: 12
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
filter_list:
  - name: first_number
    filter:
      - function: regex
        regex_pattern: "(-?[0-9]+)"
      - function: take_first
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@unittest.skipUnless(HAVE_SMOL and HAVE_HARNESS, "needs SmolLM2 (make models) and reasoning-gym, lm-eval (make venv)")
class EvaluateTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from wire_server import Engine, make_server

        cls.srv = make_server(Engine(SMOLLM2, "smol"), "127.0.0.1", 0)
        threading.Thread(target=cls.srv.serve_forever, daemon=True).start()
        cls.base = f"http://127.0.0.1:{cls.srv.server_port}/v1"
        cls.dir = tempfile.mkdtemp()
        data = os.path.join(cls.dir, "tiny_add.jsonl")
        with open(data, "w") as f:
            for i in range(3):
                f.write(json.dumps({"a": i, "b": i + 1}) + "\n")
        tasks = os.path.join(cls.dir, "tasks")
        os.mkdir(tasks)
        with open(os.path.join(tasks, "tiny_add.yaml"), "w") as f:
            f.write(TASK.format(data=data))
        cls.tasks = tasks

    @classmethod
    def tearDownClass(cls):
        cls.srv.shutdown()
        cls.srv.server_close()

    def cfg(self, **kw):
        c = {"base_url": self.base, "model": "smol", "max_tokens": 12, "temperature": 0, "seed": 1, "concurrency": 2}
        c.update(kw)
        return c

    def test_both_suites(self):
        rows = evaluate.run(self.cfg(reasoning_gym={"tasks": ["basic_arithmetic"], "size": 4, "seed": 3, "system_prompt": "direct"},
                                     lm_eval={"include_path": self.tasks, "tasks": ["tiny_add"]}))
        by = {(r["suite"], r["task"], r["metric"]): r for r in rows}
        self.assertEqual(sorted(by), [("lm_eval", "tiny_add", "exact_match,first_number"),
                                      ("reasoning_gym", "basic_arithmetic", "accuracy"),
                                      ("reasoning_gym", "basic_arithmetic", "errors"),
                                      ("reasoning_gym", "basic_arithmetic", "format_rate")])
        self.assertEqual(by[("reasoning_gym", "basic_arithmetic", "errors")]["value"], 0.0)
        for r in rows:
            self.assertTrue(0.0 <= r["value"] <= 1.0 and r["stderr"] >= 0.0, r)
        self.assertEqual(by[("reasoning_gym", "basic_arithmetic", "accuracy")]["n"], 4)
        self.assertEqual(by[("lm_eval", "tiny_add", "exact_match,first_number")]["n"], 3)
        # Hand check of the reasoning-gym score: the same requests, scored here.
        from reasoning_gym import create_dataset
        from reasoning_gym.utils import SYSTEM_PROMPTS, extract_answer
        ds = create_dataset("basic_arithmetic", size=4, seed=3)
        cl = evaluate.Client(self.cfg())
        want = [float(ds.score_answer(extract_answer(cl.chat([{"role": "system", "content": SYSTEM_PROMPTS["direct"]},
                                                               {"role": "user", "content": e["question"]}])), e)) for e in ds]
        self.assertAlmostEqual(by[("reasoning_gym", "basic_arithmetic", "accuracy")]["value"], sum(want) / 4)
        # The same config gives the same rows (seeded requests, temperature 0).
        again = evaluate.run(self.cfg(reasoning_gym={"tasks": ["basic_arithmetic"], "size": 4, "seed": 3, "system_prompt": "direct"}))
        self.assertEqual(again, rows[:3])

    def test_relative_data_files(self):
        # A task directory that carries its data file and names it
        # relative to itself (as configs/pools/learnable/eval does) is
        # read wherever the evaluator was started.
        tasks = os.path.join(self.dir, "relative")
        os.mkdir(tasks)
        with open(os.path.join(tasks, "rel_add.jsonl"), "w") as f:
            for i in range(2):
                f.write(json.dumps({"a": i, "b": 2}) + "\n")
        with open(os.path.join(tasks, "rel_add.yaml"), "w") as f:
            f.write(TASK.format(data="rel_add.jsonl").replace("task: tiny_add", "task: rel_add"))
        here = os.getcwd()
        rows = evaluate.run(self.cfg(lm_eval={"include_path": tasks, "tasks": ["rel_add"]}))
        self.assertEqual(os.getcwd(), here)
        self.assertEqual([(r["task"], r["n"]) for r in rows], [("rel_add", 2)])

    def test_dead_endpoint_is_counted(self):
        rows = evaluate.run(self.cfg(base_url=f"http://127.0.0.1:{free_port()}/v1",
                                     reasoning_gym={"tasks": ["basic_arithmetic"], "size": 3, "seed": 1}))
        by = {r["metric"]: r["value"] for r in rows}
        self.assertEqual(by, {"accuracy": 0.0, "format_rate": 0.0, "errors": 3.0})


class ConfigTest(unittest.TestCase):
    def run_cli(self, cfg):
        d = tempfile.mkdtemp()
        p = os.path.join(d, "c.json")
        with open(p, "w") as f:
            f.write(cfg if isinstance(cfg, str) else json.dumps(cfg))
        return subprocess.run([sys.executable, "-m", "spade_trainer.evaluate", "--config", p, "--out", os.path.join(d, "o.jsonl")],
                              env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=120)

    def test_bad_configs_name_the_field(self):
        base = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}
        for cfg, want in ((dict(base), "no suite"),
                          ({"model": "m", "reasoning_gym": {"tasks": ["x"]}}, "base_url is required"),
                          (dict(base, max_tokens="9", reasoning_gym={"tasks": ["chain_sum"]}), "max_tokens must be int"),
                          ("[1]", "not a JSON object"),
                          ("{", "Expecting")):
            with self.subTest(want=want):
                r = self.run_cli(cfg)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(want, r.stderr)

    @unittest.skipUnless(HAVE_HARNESS, "needs reasoning-gym")
    def test_unknown_task_and_prompt(self):
        base = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}
        r = self.run_cli(dict(base, reasoning_gym={"tasks": ["no_such_task"], "size": 2}))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("no_such_task", r.stderr)
        r = self.run_cli(dict(base, reasoning_gym={"tasks": ["chain_sum"], "system_prompt": "nope"}))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("system_prompt 'nope'", r.stderr)

    def run_check(self, cfg):
        d = tempfile.mkdtemp()
        p = os.path.join(d, "c.json")
        with open(p, "w") as f:
            json.dump(cfg, f)
        return subprocess.run([sys.executable, "-m", "spade_trainer.evaluate", "--config", p, "--check"],
                              env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=120)

    @unittest.skipUnless(HAVE_HARNESS, "needs reasoning-gym and lm-eval")
    def test_check_calls_no_server(self):
        # Port 9 (discard) answers nothing: --check must not call it.
        base = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}
        tasks = tempfile.mkdtemp()
        with open(os.path.join(tasks, "tiny_add.yaml"), "w") as f:
            f.write(TASK.format(data=os.path.join(tasks, "none.jsonl")))
        with open(os.path.join(tasks, "broken.yaml"), "w") as f:
            f.write("task: broken\n  bad: [indent\n")
        r = self.run_check(dict(base, reasoning_gym={"tasks": ["chain_sum"], "size": 3}, lm_eval={"include_path": tasks, "tasks": ["tiny_add"]}))
        self.assertEqual(r.returncode, 0, r.stderr)
        for cfg, want in (
                (dict(base, reasoning_gym={"tasks": ["no_such_task"]}), "spade_eval_error: eval.reasoning_gym.tasks: 'no_such_task'"),
                (dict(base, reasoning_gym={"tasks": ["chain_sum"], "size": 0}), "eval.reasoning_gym.size must be >= 1"),
                (dict(base, lm_eval={"include_path": os.path.join(tasks, "tiny_add.yaml"), "tasks": ["x"]}), "eval.lm_eval.include_path"),
                (dict(base, lm_eval={"include_path": tasks, "tasks": ["broken"]}), "task files that do not parse: broken.yaml:")):
            with self.subTest(want=want):
                r = self.run_check(cfg)
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertIn(want, r.stderr)
                self.assertTrue(r.stderr.strip().splitlines()[-1].startswith("spade_eval_error: "), r.stderr)


if __name__ == "__main__":
    unittest.main()

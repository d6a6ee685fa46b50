"""Score a served checkpoint on held-out suites through existing harnesses.

    python -m spade_trainer.evaluate --config CONFIG.json --out ROWS.jsonl
    python -m spade_trainer.evaluate --config CONFIG.json --check

spade's eval stage and ``spade eval`` run this against the OpenAI-compatible
endpoint that serves checkpoint(R) (docs/recipes.md "Evaluation"). CONFIG
is one JSON object:

* ``base_url`` (``http://host:port/v1``), ``model`` (the served model name),
  ``api_key_env`` (the variable holding the key, "" for none);
* ``max_tokens``, ``temperature``, ``seed`` (sent with every request),
  ``concurrency`` (requests in flight), ``timeout_s`` (one request);
* ``reasoning_gym``: ``{"tasks": [...], "size": N, "seed": S,
  "system_prompt": NAME}`` or null. Each task is a reasoning-gym dataset
  (``reasoning_gym.create_dataset``; it generates its items from the seed
  and verifies answers offline). The model gets the reasoning-gym system
  prompt NAME (a key of ``reasoning_gym.utils.SYSTEM_PROMPTS``, default
  ``default``: answer inside ``<answer>`` tags), the answer is taken with
  ``reasoning_gym.utils.extract_answer`` from the reply's content (the
  ``<think>`` blocks and the server's reasoning are not searched), and the
  dataset's ``score_answer`` scores it in [0, 1];
* ``lm_eval``: ``{"include_path": DIR, "tasks": [...], "limit": N}`` or
  null: EleutherAI's lm-evaluation-harness with its
  ``local-chat-completions`` model against the same endpoint, the chat
  template applied by the server, tasks from DIR only (task YAML and data
  files on disk; the hub is never asked: HF_HUB_OFFLINE and
  HF_DATASETS_OFFLINE are set). The harness runs with DIR as its working
  directory, so a task's relative ``data_files`` name files of DIR.

ROWS gets one JSON object per line: ``suite``, ``task``, ``metric``,
``value``, ``n`` (items scored), ``stderr`` (standard error of the mean,
or the harness's; 0 when n < 2). reasoning-gym rows per task: ``accuracy``
(mean score), ``format_rate`` (fraction of replies with an answer tag) and
``errors`` (failed requests, scored 0; value is their count). A failing
request is recorded in ``errors`` and the run goes on; a bad config
exits 2 and a harness that raises exits 1, each with a
``spade_eval_error:`` reason line as the last line on stderr. ``--check`` checks
the config without calling the endpoint (field types, the reasoning-gym
task and prompt names, the lm-eval task directory and task names, task
YAML that does not parse) and exits 0 or 2; spade runs it before it
starts a server. Lines on stderr that
start ``spade_eval: `` report failed requests (spade logs them as
warnings); ``spade_eval_progress: `` lines say how many items of a task
are scored (every tenth) and each task's accuracy when it ends (spade
logs them as they come).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import math
import os
import re
import sys
import threading
from typing import Any

_THINK = re.compile(r"<think>.*?(</think>|$)", re.S)


class ConfigError(ValueError):
    """A config field that is missing or has the wrong type; the message
    names the field."""


def _field(cfg: dict, key: str, kind, default=None, required=False):
    if key not in cfg or cfg[key] is None:
        if required:
            raise ConfigError(f"config: {key} is required")
        return default
    v = cfg[key]
    if kind is float and isinstance(v, int) and not isinstance(v, bool):
        v = float(v)
    if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
        raise ConfigError(f"config: {key} must be {kind.__name__}, got {type(v).__name__}")
    return v


def mean_stderr(xs: list[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (sample std / sqrt(n)); (0, 0)
    for no values and stderr 0 for one."""
    n = len(xs)
    if n == 0:
        return 0.0, 0.0
    m = sum(xs) / n
    if n < 2:
        return m, 0.0
    var = sum((x - m) ** 2 for x in xs) / (n - 1)
    return m, math.sqrt(var / n)


def answer_text(message: Any) -> str:
    """The reply's content without ``<think>`` blocks (a cut block runs to
    the end); "" for no content."""
    content = getattr(message, "content", None) or ""
    return _THINK.sub("", content).strip()


class Client:
    """Chat completions against one endpoint with the run's sampling
    settings (openai client: its retries are off, spade counts failures)."""

    def __init__(self, cfg: dict):
        import openai

        key_env = _field(cfg, "api_key_env", str, "")
        self.model = _field(cfg, "model", str, required=True)
        self.max_tokens = _field(cfg, "max_tokens", int, 512)
        self.temperature = _field(cfg, "temperature", float, 0.0)
        self.seed = _field(cfg, "seed", int, 0)
        self.client = openai.OpenAI(base_url=_field(cfg, "base_url", str, required=True),
                                    # a local server takes any key; the client refuses none
                                    api_key=(os.environ.get(key_env, "") if key_env else "") or "none",
                                    max_retries=0, timeout=_field(cfg, "timeout_s", float, 600.0))

    def chat(self, messages: list[dict]) -> str:
        r = self.client.chat.completions.create(model=self.model, messages=messages, max_tokens=self.max_tokens,
                                                temperature=self.temperature, seed=self.seed)
        return answer_text(r.choices[0].message)


def reasoning_gym_datasets(cfg: dict, items: int | None = None) -> tuple[list, str]:
    """The (task, dataset) pairs and the system prompt of cfg's
    reasoning-gym suite, each dataset of cfg's size or, given, of items
    (check() builds one item each); ConfigError naming the setting when
    one is wrong."""
    import reasoning_gym
    from reasoning_gym.utils import SYSTEM_PROMPTS

    tasks = _field(cfg, "tasks", list, required=True)
    size = _field(cfg, "size", int, 100)
    seed = _field(cfg, "seed", int, 0)
    prompt = _field(cfg, "system_prompt", str, "default")
    if prompt not in SYSTEM_PROMPTS:
        raise ConfigError(f"eval.reasoning_gym.system_prompt {prompt!r} is not one of {sorted(SYSTEM_PROMPTS)}")
    if size < 1:
        raise ConfigError("eval.reasoning_gym.size must be >= 1")
    out = []
    for task in tasks:
        if not isinstance(task, str):
            raise ConfigError(f"eval.reasoning_gym.tasks holds {task!r}, not a dataset name")
        try:
            out.append((task, reasoning_gym.create_dataset(task, size=items or size, seed=seed)))
        except Exception as e:  # unknown name, bad parameters
            raise ConfigError(f"eval.reasoning_gym.tasks: {task!r}: {e}") from e
    return out, prompt


def reasoning_gym_rows(cfg: dict, client: Client, concurrency: int) -> list[dict]:
    """Score each reasoning-gym task of cfg (see the module doc)."""
    from reasoning_gym.utils import SYSTEM_PROMPTS, extract_answer

    datasets, prompt = reasoning_gym_datasets(cfg)
    rows = []
    for task, ds in datasets:
        items = list(ds)
        done = [0]
        lock = threading.Lock()
        step = max(1, len(items) // 10)

        def one(entry):
            try:
                return score(entry)
            finally:
                with lock:
                    done[0] += 1
                    if done[0] % step == 0 and done[0] < len(items):
                        print(f"spade_eval_progress: {task}: {done[0]} of {len(items)} items", file=sys.stderr, flush=True)

        def score(entry):
            try:
                reply = client.chat([{"role": "system", "content": SYSTEM_PROMPTS[prompt]},
                                     {"role": "user", "content": entry["question"]}])
            except Exception as e:  # recorded, scored 0
                return 0.0, False, f"{type(e).__name__}: {e}"
            ans = extract_answer(reply)
            return float(ds.score_answer(ans, entry)), ans is not None, None

        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, concurrency)) as ex:
            results = list(ex.map(one, items))  # in item order
        scores = [s for s, _, _ in results]
        errors = [e for _, _, e in results if e]
        if errors:
            print(f"spade_eval: {task}: {len(errors)} of {len(items)} requests failed, first: {errors[0]}", file=sys.stderr)
        acc, se = mean_stderr(scores)
        fmt, fse = mean_stderr([1.0 if ok else 0.0 for _, ok, _ in results])
        n = len(items)
        print(f"spade_eval_progress: {task}: {n} of {n} items, accuracy {acc:.4f} +- {se:.4f}", file=sys.stderr, flush=True)
        rows += [dict(suite="reasoning_gym", task=task, metric="accuracy", value=acc, n=n, stderr=se),
                 dict(suite="reasoning_gym", task=task, metric="format_rate", value=fmt, n=n, stderr=fse),
                 dict(suite="reasoning_gym", task=task, metric="errors", value=float(len(errors)), n=n, stderr=0.0)]
    return rows


def _unparsable_yaml(path: str) -> list[str]:
    """The task YAML files under path that do not parse, each with its
    error: lm-evaluation-harness skips them without a word. Tags such as
    ``!function`` are accepted as they are."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    bad = []
    for root, _, files in os.walk(path):
        for name in sorted(files):
            if name.endswith((".yaml", ".yml")):
                f = os.path.join(root, name)
                try:
                    with open(f) as fh:
                        yaml.load(fh, Loader=Loader)
                except (yaml.YAMLError, OSError, UnicodeDecodeError) as e:
                    bad.append(f"{os.path.relpath(f, path)}: {' '.join(str(e).split())}")
    return sorted(bad)


def lm_eval_tasks(cfg: dict):
    """The harness's TaskManager over cfg's include_path, the path and the
    task names; ConfigError naming the setting when the directory or a
    task is missing (with the task files that do not parse)."""
    from lm_eval.tasks import TaskManager

    path = _field(cfg, "include_path", str, required=True)
    if not os.path.isdir(path):
        raise ConfigError(f"eval.lm_eval.include_path {path}: not a directory")
    tasks = _field(cfg, "tasks", list, required=True)
    tm = TaskManager(include_path=path, include_defaults=False)
    unknown = [t for t in tasks if t not in tm.all_tasks]
    if unknown:
        msg = f"eval.lm_eval.tasks {unknown} are not tasks of {path} (it has {sorted(tm.all_tasks)})"
        bad = _unparsable_yaml(path)
        if bad:
            msg += "; task files that do not parse: " + "; ".join(bad)
        raise ConfigError(msg)
    return tm, path, tasks


def lm_eval_rows(cfg: dict, top: dict, concurrency: int) -> list[dict]:
    """Run lm-evaluation-harness on the tasks of cfg's include_path and
    return one row per task and metric (``metric,filter`` as the harness
    names it)."""
    import lm_eval

    tm, path, tasks = lm_eval_tasks(cfg)
    limit = _field(cfg, "limit", int, None)
    base = _field(top, "base_url", str, required=True).rstrip("/")
    model_args = {"base_url": base + "/chat/completions", "model": _field(top, "model", str, required=True),
                  "num_concurrent": max(1, concurrency), "max_retries": 1, "tokenized_requests": False,
                  "seed": _field(top, "seed", int, 0)}
    key_env = _field(top, "api_key_env", str, "")
    if key_env and os.environ.get(key_env):
        os.environ["OPENAI_API_KEY"] = os.environ[key_env]
    # A task's data files are named relative to its task directory (the
    # tree whose digest the run pins), not to wherever spade was started:
    # datasets resolves a relative data_files path against the working
    # directory, so the harness runs inside include_path.
    with contextlib.chdir(path):
        out = lm_eval.simple_evaluate(model="local-chat-completions", model_args=model_args, tasks=tasks, task_manager=tm,
                                      apply_chat_template=True, limit=limit, log_samples=False)
    rows = []
    nsamples = out.get("n-samples", {})
    for task, res in sorted(out["results"].items()):
        n = int(nsamples.get(task, {}).get("effective", res.get("sample_len", 0)) or 0)
        for key, value in sorted(res.items()):
            if "," not in key or "_stderr," in key or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            metric, filt = key.split(",", 1)
            se = res.get(f"{metric}_stderr,{filt}")
            se = float(se) if isinstance(se, (int, float)) and math.isfinite(se) else 0.0
            rows.append(dict(suite="lm_eval", task=task, metric=key, value=float(value), n=n, stderr=se))
    return rows


def check(cfg: dict) -> None:
    """Check cfg without calling the endpoint: the top-level fields, the
    reasoning-gym task and prompt names, the lm-eval task directory and
    task names. Raises ConfigError naming the setting."""
    _field(cfg, "base_url", str, required=True)
    _field(cfg, "model", str, required=True)
    for key, kind in (("max_tokens", int), ("temperature", float), ("seed", int), ("concurrency", int), ("timeout_s", float), ("api_key_env", str)):
        _field(cfg, key, kind)
    rg, le = _suites(cfg)
    if rg is not None:
        reasoning_gym_datasets(rg, items=1)
    if le is not None:
        lm_eval_tasks(le)


def _suites(cfg: dict) -> tuple[dict | None, dict | None]:
    """cfg's reasoning_gym and lm_eval sections (None when off), with the
    hub switched off for the harnesses; ConfigError when both are off."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    rg = _field(cfg, "reasoning_gym", dict, None)
    le = _field(cfg, "lm_eval", dict, None)
    if rg is None and le is None:
        raise ConfigError("config: no suite (reasoning_gym and lm_eval are both null)")
    return rg, le


def run(cfg: dict) -> list[dict]:
    """Every row of the config's suites, reasoning-gym first."""
    rg, le = _suites(cfg)
    concurrency = _field(cfg, "concurrency", int, 8)
    rows = []
    if rg is not None:
        rows += reasoning_gym_rows(rg, Client(cfg), concurrency)
    if le is not None:
        rows += lm_eval_rows(le, cfg, concurrency)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="spade_trainer.evaluate", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="JSON config (see the module doc)")
    p.add_argument("--out", help="JSONL file of result rows (required without --check)")
    p.add_argument("--check", action="store_true", help="check the config without calling the endpoint; write nothing")
    a = p.parse_args(argv)
    if not a.check and not a.out:
        p.error("--out is required without --check")
    try:
        try:
            with open(a.config) as f:
                cfg = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"config file {a.config}: {e}") from e
        if not isinstance(cfg, dict):
            raise ConfigError(f"config file {a.config}: not a JSON object")
        if a.check:
            check(cfg)
            return 0
        rows = run(cfg)
    except ConfigError as e:
        print(f"spade_eval_error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # a harness that raised: the traceback, then one reason line
        import traceback

        traceback.print_exc()
        print(f"spade_eval_error: evaluation failed: {type(e).__name__}: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        for r in rows:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    os.replace(tmp, a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

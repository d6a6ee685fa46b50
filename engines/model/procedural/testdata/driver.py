"""JSON-lines driver for procedural-backend tests: loads one environment
source and runs reset/step on request, so the Go test can play it with the
Go agent. Requests: {"cmd": "load", "source": str} | {"cmd": "reset",
"seed": int} | {"cmd": "step", "action": str} | {"cmd": "solution"}. Every reply is one JSON line;
errors are replies with an "error" key, never a crash."""
import json
import sys
import traceback
import types

import spade_env


def find_env(ns):
    for value in ns.values():
        if (isinstance(value, type) and issubclass(value, spade_env.Env)
                and value not in (spade_env.Env, spade_env.ToolUseEnv)):
            return value
    raise ValueError("no Env subclass in source")


def main():
    env_cls = None
    env = None
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if req["cmd"] == "load":
                mod = types.ModuleType("generated_env")
                exec(compile(req["source"], "generated_env.py", "exec"), mod.__dict__)
                env_cls = find_env(mod.__dict__)
                out = {"max_turns": env_cls.max_turns, "name": env_cls.name, "skill": env_cls.skill,
                       "tools": getattr(env_cls, "tools", [])}
            elif req["cmd"] == "solution":
                out = {"actions": env.solution()}
            elif req["cmd"] == "reset":
                env = env_cls()
                obs, info = env.reset(seed=req["seed"])
                out = {"obs": obs, "info": info}
                if isinstance(env, spade_env.ToolUseEnv):
                    out["criteria"] = env.criteria_status()
            else:
                obs, reward, terminated, truncated, info = env.step(req["action"])
                out = {"obs": obs, "reward": reward, "terminated": terminated,
                       "truncated": truncated, "info": info}
        except Exception:
            out = {"error": traceback.format_exc(limit=3)}
        sys.stdout.write(json.dumps(out, default=str) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()

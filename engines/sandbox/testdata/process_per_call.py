"""The naive executor the sandbox is measured against (BenchmarkStep here,
BenchmarkSandbox in internal/bench): a fresh interpreter per call that loads
the program, resets and takes one step, without bubblewrap, which flatters
the baseline.

Usage: python3 -S process_per_call.py HARNESS_DIR PROGRAM.py
"""

import json
import sys

sys.path.insert(0, sys.argv[1])
ns = {"__name__": "spade_program"}
exec(compile(open(sys.argv[2]).read(), "<env>", "exec"), ns)
env = ns["Counter"]()
env.reset(seed=1)
obs, r, term, trunc, info = env.step("add1")
print(json.dumps([obs, r, term, trunc, info]))

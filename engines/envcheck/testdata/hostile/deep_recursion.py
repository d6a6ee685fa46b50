# expect: probe_step crash|recursion|memory|timeout
# Raises the recursion limit and recurses through a C function (sorted with a
# key), so every level also uses C stack, until the C stack overflows.
import sys

from spade_env import Env


def down(n):
    return sorted([0], key=lambda _: down(n + 1))[0]


class Deep(Env):
    def reset(self, seed=None):
        super().reset(seed)
        return "Valid actions: go", {}

    def step(self, action):
        sys.setrecursionlimit(10 ** 8)
        return "o", float(down(0)), True, False, {}

# expect: probe_step timeout|cpu_time
# A long computation inside one C call (a huge integer power): no Python
# bytecode runs, so in-process signal handlers never get a chance.
from spade_env import Env


class Power(Env):
    def reset(self, seed=None):
        super().reset(seed)
        return "Valid actions: go", {}

    def step(self, action):
        n = 7 ** (10 ** 9)
        return str(n % 10), 0.0, True, False, {}

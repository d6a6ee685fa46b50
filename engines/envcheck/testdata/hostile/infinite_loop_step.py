# expect: probe_step timeout
# A pure-Python infinite loop in step.
from spade_env import Env


class Spin(Env):
    def reset(self, seed=None):
        super().reset(seed)
        return "Valid actions: go", {}

    def step(self, action):
        while True:
            pass

# expect: probe_step output_limit
# Prints without end.
from spade_env import Env


class Chatty(Env):
    def reset(self, seed=None):
        super().reset(seed)
        return "Valid actions: go", {}

    def step(self, action):
        line = "x" * 65536
        while True:
            print(line)

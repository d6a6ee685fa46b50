# expect: probe_step timeout|cpu_time|crash|exit|exception
# A classic fork bomb: every process forks forever and ignores failures.
import os

from spade_env import Env


class Bomb(Env):
    def reset(self, seed=None):
        super().reset(seed)
        return "Valid actions: go", {}

    def step(self, action):
        while True:
            try:
                os.fork()
            except OSError:
                pass

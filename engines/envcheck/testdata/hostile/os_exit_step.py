# expect: probe_step exit
# Calls os._exit in the middle of step: no exception, the process just ends.
import os

from spade_env import Env


class HardQuitter(Env):
    def reset(self, seed=None):
        super().reset(seed)
        return "Valid actions: go", {}

    def step(self, action):
        os._exit(0)

# expect: probe_step exit
# Calls sys.exit in the middle of step.
import sys

from spade_env import Env


class Quitter(Env):
    def reset(self, seed=None):
        super().reset(seed)
        return "Valid actions: go", {}

    def step(self, action):
        sys.exit(0)

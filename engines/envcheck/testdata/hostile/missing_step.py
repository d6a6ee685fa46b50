# expect: metadata -
# Defines reset but no step.
from spade_env import Env


class Half(Env):
    def reset(self, seed=None):
        super().reset(seed)
        return "Valid actions: go", {}

# expect: reward -
# Returns NaN, which passes a naive `low <= r <= high` check's negation.
from spade_env import Env


class NotANumber(Env):
    def reset(self, seed=None):
        super().reset(seed)
        return "Valid actions: go", {}

    def step(self, action):
        return "done\nValid actions: go", float("nan"), True, False, {}

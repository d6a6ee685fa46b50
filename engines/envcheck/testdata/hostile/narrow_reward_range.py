# expect: reward -
# Declares reward_range (0, 1e-12) and pays 1e-9, a thousand times its top:
# a fixed rounding tolerance of 1e-9 would let it through.
from spade_env import Env


class Narrow(Env):
    name, skill, max_turns, reward_range = "narrow", "planning", 3, (0.0, 1e-12)

    def reset(self, seed=None):
        super().reset(seed)
        return "Pick.\nValid actions: a | b", {}

    def step(self, action):
        return "The end.", 1e-9, True, False, {"success": True}

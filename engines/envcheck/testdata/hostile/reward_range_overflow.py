# expect: metadata -
# Declares reward_range (-1e308, 1e308): both bounds finite, but the width
# overflows to infinity. The designer reward divides regret by the width
# and takes an infinite one as 1, so this program's returns (1e6 for a win)
# would reach the designer unnormalised and saturate its reward.
from spade_env import Env


class Unbounded(Env):
    name, skill, max_turns, reward_range = "unbounded", "planning", 3, (-1e308, 1e308)

    def reset(self, seed=None):
        super().reset(seed)
        self.secret = self.rng.choice("ab")
        return "Pick a letter.\nValid actions: a | b", {}

    def step(self, action):
        win = action == self.secret
        return "The end.", 1e6 if win else 0.0, True, False, {"success": win}

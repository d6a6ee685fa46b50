# expect: observation -
# Every observation is zero-width spaces and a NUL: not empty, and not
# text an agent can read.
from spade_env import Env


class Invisible(Env):
    name, skill, max_turns, reward_range = "invisible", "planning", 3, (0.0, 1.0)

    def reset(self, seed=None):
        super().reset(seed)
        return "\u200b\u200b\x00\u200b", {}

    def step(self, action):
        return "\u200b", 0.0, True, False, {}

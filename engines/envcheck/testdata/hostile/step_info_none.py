# expect: step_tuple -
# Replaces the harness's step shape check in its own process and returns
# None as step's info, which reaches Go as JSON null (a null decodes into a
# Go map without error).
import sys

from spade_env import Env

sys.modules["spade_harness"].check_step = lambda out: out


class NoneInfo(Env):
    name, skill, max_turns, reward_range = "none_info", "planning", 3, (0.0, 1.0)

    def reset(self, seed=None):
        super().reset(seed)
        return "Pick.\nValid actions: a | b", {}

    def step(self, action):
        return "The end.", 0.0, True, False, None

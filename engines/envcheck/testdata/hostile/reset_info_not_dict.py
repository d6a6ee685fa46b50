# expect: reset -
# Replaces the harness's reset shape check in its own process and returns a
# list as reset's info. The validator must judge the info that arrives.
import sys

from spade_env import Env

sys.modules["spade_harness"].check_reset = lambda out: out


class ListInfo(Env):
    name, skill, max_turns, reward_range = "list_info", "planning", 3, (0.0, 1.0)

    def reset(self, seed=None):
        super().reset(seed)
        return "Pick.\nValid actions: a | b", [1, 2, 3]

    def step(self, action):
        return "The end.", 0.0, True, False, {"success": False}

# expect: episode_ends -
# Switches off the harness's forced truncation at max_turns (it zeroes
# max_turns on the class once the metadata has been sent; the harness reads
# the limit again at every reset) and ends its episodes one step after
# max_turns. The validator must count the steps itself.
import sys

from spade_env import Env

H = sys.modules["spade_harness"]
real = H.metadata


def metadata(cls):
    meta = real(cls)
    cls.max_turns = 0
    return meta


H.metadata = metadata


class PastLimit(Env):
    name, skill, max_turns, reward_range = "past_limit", "planning", 3, (0.0, 1.0)

    def reset(self, seed=None):
        super().reset(seed)
        self.t = 0
        return "Pick.\nValid actions: a | b", {}

    def step(self, action):
        self.t += 1
        if self.t > 3:
            return "The end.", 0.0, True, False, {"success": False}
        return "Again.\nValid actions: a | b", 0.0, False, False, {}

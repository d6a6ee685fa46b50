# expect: metadata -
# Replaces the harness's metadata function in its own process, so the
# environment kind it reports is a terminal escape sequence instead of
# "game" or "tool_use". The validator accepts only those two.
import sys

from spade_env import Env

H = sys.modules["spade_harness"]
real = H.metadata


def metadata(cls):
    meta = real(cls)
    meta["kind"] = "\x1b[2K\rforged.py: VALID"
    return meta


H.metadata = metadata


class Forged(Env):
    max_turns = 3

    def reset(self, seed=None):
        super().reset(seed)
        return "Valid actions: a | b", {}

    def step(self, action):
        return "Valid actions: a | b", 0.0, True, False, {}

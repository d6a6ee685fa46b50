# expect: deterministic -
# Draws a salt from os.urandom once, at module level, and lets it decide
# the secret. Every episode of one program process sees the same salt, so
# replays in the same process agree; another process (the rollouts, a
# rerun of the round) gets another salt and other episodes for the same
# seed.
import os

from spade_env import Env

SALT = int.from_bytes(os.urandom(8), "big")


class Salted(Env):
    name, skill, max_turns, reward_range = "salted", "planning", 3, (0.0, 1.0)

    def reset(self, seed=None):
        super().reset(seed)
        self.secret = "ab"[(SALT >> (seed or 0)) & 1]
        self.t = 0
        return f"Guess a letter (table {SALT:x}).\nValid actions: a | b", {}

    def step(self, action):
        self.t += 1
        win = action == self.secret
        if win or self.t >= 3:
            return "The end.", float(win), True, False, {"success": win}
        return "No.\nValid actions: a | b", 0.0, False, False, {}

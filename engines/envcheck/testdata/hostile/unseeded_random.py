# expect: deterministic -
# Draws its secret from the OS entropy pool instead of self.rng.
import random

from spade_env import Env


class Dice(Env):
    max_turns = 4

    def reset(self, seed=None):
        super().reset(seed)
        self.secret = random.SystemRandom().randint(1, 10 ** 9)
        return f"Round starts ({self.secret % 1000}).\nValid actions: roll | stop", {}

    def step(self, action):
        return f"You see {self.secret}.\nValid actions: roll | stop", 0.0, False, False, {}

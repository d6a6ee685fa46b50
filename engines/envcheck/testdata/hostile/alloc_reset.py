# expect: reset memory
# Allocates 8 GiB in reset.
from spade_env import Env


class Hog(Env):
    def reset(self, seed=None):
        super().reset(seed)
        self.block = bytearray(8 << 30)
        return "Valid actions: go", {}

    def step(self, action):
        return "o", 0.0, True, False, {}

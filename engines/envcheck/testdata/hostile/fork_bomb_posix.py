# expect: reset timeout|cpu_time|crash|exit|exception
# Fork bomb through the low-level posix module, in reset.
import posix

from spade_env import Env


class PosixBomb(Env):
    def reset(self, seed=None):
        super().reset(seed)
        while True:
            try:
                posix.fork()
            except OSError:
                pass

    def step(self, action):
        return "o", 0.0, True, False, {}

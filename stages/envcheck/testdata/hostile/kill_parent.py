# expect: probe_step crash|exit|timeout
# Kills its parent (the harness) and then every process it may signal, then
# waits: the sandbox must collapse (or time out) rather than answer.
import os
import signal
import time

from spade_env import Env


class Parricide(Env):
    def reset(self, seed=None):
        super().reset(seed)
        return "Valid actions: go", {}

    def step(self, action):
        os.kill(os.getppid(), signal.SIGKILL)
        os.kill(-1, signal.SIGKILL)
        time.sleep(10)
        return "o", 0.0, True, False, {}

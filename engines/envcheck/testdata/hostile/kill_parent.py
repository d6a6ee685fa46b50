# expect: probe_step crash|exit|timeout|exception
# Kills its parent and then every process it may signal, then waits. Under
# bubblewrap the parent is the sandbox's zygote, pid 1 of its namespace,
# which the kernel shields from SIGKILL sent inside; kill(-1) then finds no
# other process and raises, so the step fails with an exception. Elsewhere
# the program's process dies (crash, exit) or the call times out.
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

# expect: probe_step timeout|cpu_time|crash|exit|exception
# Fork bomb through multiprocessing: each child starts more children.
import multiprocessing

from spade_env import Env


def spawn():
    while True:
        try:
            multiprocessing.Process(target=spawn).start()
        except Exception:
            pass


class MPBomb(Env):
    def reset(self, seed=None):
        super().reset(seed)
        return "Valid actions: go", {}

    def step(self, action):
        spawn()

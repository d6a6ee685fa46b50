# expect: probe_step timeout|cpu_time
# Ignores SIGTERM/SIGALRM/SIGINT and swallows every BaseException while
# spinning: only SIGKILL of the whole sandbox stops it.
import signal

from spade_env import Env


class Stubborn(Env):
    def reset(self, seed=None):
        super().reset(seed)
        for sig in (signal.SIGTERM, signal.SIGALRM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):
            signal.signal(sig, signal.SIG_IGN)
        return "Valid actions: go", {}

    def step(self, action):
        while True:
            try:
                while True:
                    pass
            except BaseException:
                continue

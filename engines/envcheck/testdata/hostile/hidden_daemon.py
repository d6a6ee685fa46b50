# expect: cleanup -
# Switches off the harness's per-episode sweep of stray processes (code in
# the program's own process, which the program can change) and leaves a
# daemon from module level, before any episode, then behaves like a valid
# game. Only the sandbox's init, which the program cannot reach, finds the
# daemon when the program is closed. It runs `sleep {{MARKER}}` so the test
# can look for it on the host after teardown.
import os
import sys

from spade_env import Env

sys.modules["spade_harness"].kill_strays = lambda: False
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        for fd in range(0, 64):
            try:
                os.close(fd)
            except OSError:
                pass
        marker = "{{MARKER}}"  # filled in by the test; run by hand, sleep an hour
        os.execv("/usr/bin/sleep", ["sleep", marker if marker.isdigit() else "3600"])
    os._exit(0)
os.waitpid(pid, 0)


class HiddenDaemon(Env):
    max_turns = 3

    def reset(self, seed=None):
        super().reset(seed)
        return "Valid actions: a | b", {}

    def step(self, action):
        return "Valid actions: a | b", 0.0, False, False, {}

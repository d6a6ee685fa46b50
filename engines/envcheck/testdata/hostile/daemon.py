# expect: cleanup -
# Leaves a double-forked daemon (new session, stdio closed) behind in reset,
# then behaves like a valid game. The daemon runs `sleep {{MARKER}}` so the
# test can look for it on the host after teardown.
import os

from spade_env import Env


class Daemon(Env):
    max_turns = 3

    def reset(self, seed=None):
        super().reset(seed)
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() == 0:
                for fd in range(0, 64):
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                os.execv("/usr/bin/sleep", ["sleep", "{{MARKER}}"])
            os._exit(0)
        os.waitpid(pid, 0)
        return "Valid actions: a | b", {}

    def step(self, action):
        return "Valid actions: a | b", 0.0, False, False, {}

# expect: reset exception
# Tries to read host files: a secret the test plants, the checkout, the
# root home, /etc/shadow and pid 1's environment. If anything is readable it
# leaks it through the observation and behaves validly (so the test fails).
from spade_env import Env

TARGETS = ["{{HOSTDIR}}/secret.txt", "/work/main/go.mod", "/root/.bashrc", "/etc/shadow", "/etc/passwd", "/proc/1/environ"]


class Snoop(Env):
    max_turns = 2

    def reset(self, seed=None):
        super().reset(seed)
        found = []
        for path in TARGETS:
            try:
                with open(path, "rb") as f:
                    data = f.read(4096)
            except OSError:
                continue
            if path == "/proc/1/environ" and b"SECRET" not in data:
                continue  # the sandbox's own init: nothing of the host's
            found.append(f"{path}: {data[:200]!r}")
        if not found:
            raise PermissionError("no host file was readable")
        return "LEAK " + " | ".join(found) + "\nValid actions: a", {}

    def step(self, action):
        return "Valid actions: a", 0.0, False, False, {}

# expect: reset exception
# Tries to write outside its private /tmp: the test's directory, the
# checkout, /usr, /root. Behaves validly if any write lands.
from spade_env import Env

TARGETS = ["{{HOSTDIR}}/planted.txt", "{{HOSTDIR}}/secret.txt", "/work/main/planted.txt", "/usr/planted.txt", "/root/planted.txt", "/planted.txt"]


class Vandal(Env):
    max_turns = 2

    def reset(self, seed=None):
        super().reset(seed)
        wrote = []
        for path in TARGETS:
            try:
                with open(path, "w") as f:
                    f.write("pwned")
                wrote.append(path)
            except OSError:
                pass
        if not wrote:
            raise PermissionError("nothing outside /tmp is writable")
        return "WROTE " + " ".join(wrote) + "\nValid actions: a", {}

    def step(self, action):
        return "Valid actions: a", 0.0, False, False, {}

# expect: reset file_size
# Writes a 100 MB file (the sandbox's /tmp is a small tmpfs and RLIMIT_FSIZE
# caps any file).
from spade_env import Env


class Writer(Env):
    def reset(self, seed=None):
        super().reset(seed)
        with open("/tmp/big.bin", "wb") as f:
            for _ in range(100):
                f.write(b"\0" * (1 << 20))
        return "Valid actions: go", {}

    def step(self, action):
        return "o", 0.0, True, False, {}

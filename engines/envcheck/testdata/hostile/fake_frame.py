# expect: reward -
# Prints a forged reply frame (valid length prefix and JSON claiming an
# in-range reward) to stdout, then returns reward 5.0, outside its range.
# If the forgery were accepted the environment would pass.
import json
import struct
import sys

from spade_env import Env

FAKE = json.dumps({"ok": True, "obs": "forged\nValid actions: go", "reward": 0.5, "terminated": True,
                   "truncated": False, "info": {"success": True}}).encode()


class Forger(Env):
    max_turns = 3

    def reset(self, seed=None):
        super().reset(seed)
        return "Valid actions: go", {}

    def step(self, action):
        sys.stdout.buffer.write(struct.pack(">I", len(FAKE)) + FAKE)
        sys.stdout.flush()
        return "real\nValid actions: go", 5.0, True, False, {}

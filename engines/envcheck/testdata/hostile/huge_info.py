# expect: probe_step reply_limit|memory|timeout
# Returns a 100 MB info dict. The harness refuses it (reply_limit) before
# serialising; on a heavily loaded machine building the 100 MB string alone
# can outlast the call timeout, which is also a rejection within limits.
from spade_env import Env


class Blob(Env):
    def reset(self, seed=None):
        super().reset(seed)
        return "Valid actions: go", {}

    def step(self, action):
        return "o", 0.0, True, False, {"blob": "x" * (100 << 20)}

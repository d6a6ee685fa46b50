# expect: step_tuple contract
# Returns the old Gym 4-tuple (obs, reward, done, info).
from spade_env import Env


class OldGym(Env):
    def reset(self, seed=None):
        super().reset(seed)
        return "Valid actions: go", {}

    def step(self, action):
        return "o", 0.0, False, {}

# expect: compile syntax
from spade_env import Env


class Broken(Env):
    def reset(self, seed=None)
        return "o", {}

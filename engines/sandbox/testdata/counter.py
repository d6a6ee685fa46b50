from spade_env import Env, valid_actions_line


class Counter(Env):
    """Reach the hidden target by adding 1 or 2; trivial, for tests and benchmarks."""

    name = "counter"
    skill = "planning"
    max_turns = 1000000
    reward_range = (0.0, 1.0)

    def reset(self, seed=None):
        super().reset(seed)
        self.target = self.rng.randint(5, 9)
        self.total = 0
        return f"Reach {self.target}. " + valid_actions_line(["add1", "add2"]), {"target": self.target}

    def step(self, action):
        if action == "add1":
            self.total += 1
        elif action == "add2":
            self.total += 2
        else:
            return "Unknown action. " + valid_actions_line(["add1", "add2"]), 0.0, False, False, {}
        if self.total == self.target:
            self.total = 0
            return "Reached. " + valid_actions_line(["add1", "add2"]), 1.0, False, False, {"success": True}
        if self.total > self.target:
            self.total = 0
        return f"Total {self.total}. " + valid_actions_line(["add1", "add2"]), 0.0, False, False, {}

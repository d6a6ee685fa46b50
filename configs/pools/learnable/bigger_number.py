"""One-turn game: pick the bigger of two numbers. Part of the CPU
learning recipe (configs/learn-cpu.yaml)."""

from spade_env import Env, valid_actions_line


class BiggerNumber(Env):
    name = "bigger_number"
    skill = "quantitative_reasoning"
    max_turns = 1
    reward_range = (0.0, 1.0)

    def reset(self, seed=None):
        super().reset(seed)
        a, b = self.rng.sample(range(10, 100), 2)
        self.answer = str(max(a, b))
        self.options = [str(a), str(b)]
        obs = f"Which number is bigger, {a} or {b}?\n" + valid_actions_line(self.options)
        return obs, {"a": a, "b": b}

    def step(self, action):
        win = action.strip() == self.answer
        obs = ("Correct" if win else "Wrong") + f": {self.answer} is bigger."
        return obs, 1.0 if win else 0.0, True, False, {"success": win}

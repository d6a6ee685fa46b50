"""A multi-turn hidden-number game: the agent narrows down a secret number
from higher/lower feedback. Example for docs/environment-contract.md."""

from spade_env import Env, valid_actions_line


class GuessGame(Env):
    name = "guess_game"
    skill = "logical_deduction"
    max_turns = 6
    reward_range = (0.0, 1.0)

    LOW, HIGH = 1, 16

    def reset(self, seed=None):
        super().reset(seed)  # seeds self.rng
        self.secret = self.rng.randint(self.LOW, self.HIGH)
        self.low, self.high = self.LOW, self.HIGH
        self.turn = 0
        obs = (
            f"I am thinking of a whole number from {self.LOW} to {self.HIGH}. "
            f"You have {self.max_turns} guesses; after each wrong guess I say 'higher' or 'lower'.\n"
            + self._actions()
        )
        return obs, {"low": self.low, "high": self.high}

    def _actions(self):
        return valid_actions_line(f"guess {n}" for n in range(self.LOW, self.HIGH + 1))

    def step(self, action):
        self.turn += 1
        words = action.strip().lower().split()
        if len(words) != 2 or words[0] != "guess" or not words[1].lstrip("-").isdigit():
            obs = "I did not understand that. Reply like 'guess 7'.\n" + self._actions()
            return self._end_or_continue(obs, {"error": "malformed"})
        n = int(words[1])
        if not self.LOW <= n <= self.HIGH:
            obs = f"{n} is outside {self.LOW}-{self.HIGH}.\n" + self._actions()
            return self._end_or_continue(obs, {"error": "out_of_range"})
        if n == self.secret:
            return f"Correct! The number was {self.secret}.", 1.0, True, False, {"success": True}
        if n < self.secret:
            self.low = max(self.low, n + 1)
            hint = "higher"
        else:
            self.high = min(self.high, n - 1)
            hint = "lower"
        obs = f"{n} is wrong: go {hint}.\n" + self._actions()
        return self._end_or_continue(obs, {"hint": hint})

    def _end_or_continue(self, obs, info):
        if self.turn >= self.max_turns:
            info["success"] = False
            return f"Out of guesses. The number was {self.secret}.", 0.0, False, True, info
        return obs, 0.0, False, False, info

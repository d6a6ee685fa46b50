"""One-turn game: name the opposite of a common word, chosen from three.
Part of the CPU learning recipe (configs/learn-cpu.yaml): a task a 135M
instruct model gets right about half of the time before training."""

from spade_env import Env, valid_actions_line

PAIRS = [
    ("hot", "cold"), ("big", "small"), ("up", "down"), ("open", "closed"),
    ("day", "night"), ("fast", "slow"), ("happy", "sad"), ("old", "new"),
    ("light", "dark"), ("full", "empty"), ("hard", "soft"), ("early", "late"),
    ("left", "right"), ("wet", "dry"), ("long", "short"), ("rich", "poor"),
]


class OppositeWord(Env):
    name = "opposite_word"
    skill = "word_knowledge"
    max_turns = 1
    reward_range = (0.0, 1.0)

    def reset(self, seed=None):
        super().reset(seed)
        i = self.rng.randrange(len(PAIRS))
        word, self.answer = PAIRS[i]
        others = [p[1] for j, p in enumerate(PAIRS) if j != i]
        options = self.rng.sample(others, 2) + [self.answer]
        self.rng.shuffle(options)
        self.options = options
        obs = f'What is the opposite of "{word}"?\n' + valid_actions_line(options)
        return obs, {"word": word}

    def step(self, action):
        choice = action.strip().lower()
        win = choice == self.answer
        if win:
            obs = f'Correct: the opposite is "{self.answer}".'
        else:
            obs = f'Wrong: the opposite is "{self.answer}".'
        return obs, 1.0 if win else 0.0, True, False, {"success": win}

"""One-turn game: the sound an animal makes, chosen from four. Part of the
CPU learning recipe (configs/learn-cpu.yaml)."""

from spade_env import Env, valid_actions_line

SOUNDS = [
    ("cow", "moo"), ("dog", "woof"), ("cat", "meow"), ("duck", "quack"),
    ("sheep", "baa"), ("lion", "roar"), ("snake", "hiss"), ("owl", "hoot"),
    ("pig", "oink"), ("bee", "buzz"),
]


class AnimalSound(Env):
    name = "animal_sound"
    skill = "word_knowledge"
    max_turns = 1
    reward_range = (0.0, 1.0)

    def reset(self, seed=None):
        super().reset(seed)
        i = self.rng.randrange(len(SOUNDS))
        animal, self.answer = SOUNDS[i]
        others = [s for j, (_, s) in enumerate(SOUNDS) if j != i]
        options = self.rng.sample(others, 3) + [self.answer]
        self.rng.shuffle(options)
        obs = f"What sound does a {animal} make?\n" + valid_actions_line(options)
        return obs, {"animal": animal}

    def step(self, action):
        win = action.strip().lower() == self.answer
        obs = ("Correct" if win else "Wrong") + f": a {self.answer}."
        return obs, 1.0 if win else 0.0, True, False, {"success": win}

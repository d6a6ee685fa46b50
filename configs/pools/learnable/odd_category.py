"""One-turn game: which of three words belongs to a category. Part of the
CPU learning recipe (configs/learn-cpu.yaml). A 135M instruct model knows
most answers but tends to name the category last ("Apple is a fruit."),
so its reply does not end with the action: what it learns here is mostly
to answer as asked."""

from spade_env import Env, valid_actions_line

CATEGORIES = {
    "a fruit": ["apple", "banana", "cherry", "grape", "lemon", "mango", "orange", "pear"],
    "an animal": ["cat", "dog", "horse", "lion", "rabbit", "tiger", "zebra", "sheep"],
    "a colour": ["red", "blue", "green", "yellow", "purple", "white", "black", "brown"],
    "a vehicle": ["car", "bus", "train", "bicycle", "truck", "boat", "plane", "tractor"],
    "a piece of furniture": ["chair", "table", "sofa", "bed", "desk", "shelf", "stool", "wardrobe"],
}


class OddCategory(Env):
    name = "odd_category"
    skill = "word_knowledge"
    max_turns = 1
    reward_range = (0.0, 1.0)

    def reset(self, seed=None):
        super().reset(seed)
        names = sorted(CATEGORIES)
        target = self.rng.choice(names)
        self.answer = self.rng.choice(CATEGORIES[target])
        others = [w for n in names if n != target for w in CATEGORIES[n]]
        options = self.rng.sample(others, 2) + [self.answer]
        self.rng.shuffle(options)
        obs = f"Which of these is {target}?\n" + valid_actions_line(options)
        return obs, {"category": target}

    def step(self, action):
        win = action.strip().lower() == self.answer
        obs = ("Correct" if win else "Wrong") + f": {self.answer}."
        return obs, 1.0 if win else 0.0, True, False, {"success": win}

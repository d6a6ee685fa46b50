"""Unit tests for the spade_env contract (run by TestPythonUnitTests in Go)."""

import json
import unittest

import spade_env


class Bank(spade_env.ToolUseEnv):
    max_turns = 6
    tools = [
        {"name": "deposit", "description": "Add money.", "parameters": {"type": "object",
         "properties": {"amount": {"type": "integer"}, "memo": {"type": ["string", "null"]}}, "required": ["amount"]}},
        {"name": "boom", "description": "Raises.", "parameters": {"type": "object", "properties": {}}},
    ]

    def initial_state(self):
        return {"balance": self.rng.randint(0, 5)}

    def instructions(self):
        b = self.state["balance"]
        return [("Deposit 10.", lambda s: s["balance"] >= b + 10),
                ("Deposit 10 more.", lambda s: s["balance"] >= b + 20),
                ("Deposit 5 more.", lambda s: s["balance"] >= b + 25)]

    def tool_deposit(self, amount, memo=None):
        self.state["balance"] += amount
        return f"balance {self.state['balance']}"

    def tool_boom(self):
        raise RuntimeError("backend down")


def call(name, **args):
    return json.dumps({"name": name, "arguments": args})


class ValidateArguments(unittest.TestCase):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "x": {"type": "number"},
              "b": {"type": "boolean"}, "c": {"type": "string", "enum": ["a", "b"]}}, "required": ["n"]}

    def test_cases(self):
        cases = [
            ({"n": 1}, None),
            ([], "arguments must be a JSON object"),
            ({}, "missing required argument 'n'"),
            ({"n": 1, "z": 0}, "unknown argument 'z'"),
            ({"n": True}, "argument 'n' must be of type integer"),
            ({"n": 1.5}, "argument 'n' must be of type integer"),
            ({"n": 1, "x": float("nan")}, "argument 'x' must be of type number"),
            ({"n": 1, "b": 1}, "argument 'b' must be of type boolean"),
            ({"n": 1, "c": "z"}, "argument 'c' must be one of"),
        ]
        for args, want in cases:
            with self.subTest(args=args):
                got = spade_env.validate_arguments(self.schema, args)
                if want is None:
                    self.assertIsNone(got)
                else:
                    self.assertIn(want, got)


class ToolUse(unittest.TestCase):
    def test_full_episode_rewards_and_success(self):
        env = Bank()
        obs, info = env.reset(seed=3)
        self.assertIn("Instruction 1 of 3: Deposit 10.", obs)
        self.assertNotIn("Deposit 10 more", obs)  # revealed one at a time
        self.assertEqual(env.criteria_status(), [False, False, False])
        total = 0.0
        for amount in (10, 10, 5):
            obs, r, term, trunc, info = env.step(call("deposit", amount=amount))
            total += r
        self.assertTrue(term)
        self.assertFalse(trunc)
        self.assertTrue(info["success"])
        self.assertAlmostEqual(total, 1.0)
        self.assertEqual(env.step("done")[2], True)  # after the end: terminal, no reward

    def test_malformed_actions_are_feedback(self):
        env = Bank()
        env.reset(seed=1)
        for action, err in [("nonsense", "invalid_json"), ("[1]", "invalid_call"), (call("nope"), "unknown_tool"),
                            (call("deposit"), "invalid_arguments"), (call("deposit", amount="5"), "invalid_arguments")]:
            obs, r, term, trunc, info = env.step(action)
            self.assertEqual((r, term, info.get("error")), (0.0, False, err), action)
            self.assertIn("Valid actions:", obs)

    def test_fenced_and_string_arguments(self):
        env = Bank()
        env.reset(seed=1)
        fenced = "```json\n" + call("deposit", amount=10) + "\n```"
        self.assertGreater(env.step(fenced)[1], 0)
        wire = json.dumps({"name": "deposit", "arguments": json.dumps({"amount": 10})})
        self.assertGreater(env.step(wire)[1], 0)

    def test_tool_exception_is_reported_not_raised(self):
        env = Bank()
        env.reset(seed=1)
        obs, r, term, trunc, info = env.step(call("boom"))
        self.assertIn("backend down", obs)
        self.assertIn("RuntimeError", info["tool_error"])

    def test_done_early_and_truncation(self):
        env = Bank()
        env.reset(seed=1)
        obs, r, term, trunc, info = env.step("done")
        self.assertTrue(term)
        self.assertFalse(info["success"])
        env.reset(seed=1)
        for _ in range(Bank.max_turns):
            obs, r, term, trunc, info = env.step("junk")
        self.assertTrue(trunc)
        self.assertFalse(info["success"])

    def test_seeded_state_is_reproducible(self):
        a, b = Bank(), Bank()
        self.assertEqual(a.reset(seed=5), b.reset(seed=5))
        self.assertEqual(a.state, b.state)


class Base(unittest.TestCase):
    def test_reset_seeds_rng_and_step_is_abstract(self):
        env = spade_env.Env()
        env.reset(seed=9)
        x = env.rng.random()
        env.reset(seed=9)
        self.assertEqual(x, env.rng.random())
        with self.assertRaises(NotImplementedError):
            env.step("a")

    def test_valid_actions_line(self):
        self.assertEqual(spade_env.valid_actions_line(["a", "b"]), "Valid actions: a | b")


if __name__ == "__main__":
    unittest.main()

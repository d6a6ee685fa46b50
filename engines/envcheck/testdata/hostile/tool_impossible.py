# expect: impossibility -
# A criterion reads state that initial_state never defines, and a declared
# tool has no implementation: the task cannot be completed.
from spade_env import ToolUseEnv


class Impossible(ToolUseEnv):
    tools = [
        {"name": "deposit", "description": "Deposit money.", "parameters": {"type": "object",
         "properties": {"amount": {"type": "number"}}, "required": ["amount"]}},
        {"name": "withdraw", "description": "Withdraw money.", "parameters": {"type": "object",
         "properties": {"amount": {"type": "number"}}, "required": ["amount"]}},
    ]

    def initial_state(self):
        return {"balance": 0}

    def instructions(self):
        return [("Deposit 10.", lambda s: s["balance"] >= 10),
                ("Withdraw 5.", lambda s: s.get("withdrawn", 0) >= 5),
                ("Deposit 20 more.", lambda s: s["balance"] >= 25)]

    def tool_deposit(self, amount):
        self.state["balance"] += amount
        return "ok"

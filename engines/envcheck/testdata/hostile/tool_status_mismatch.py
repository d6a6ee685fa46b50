# expect: reset_gate contract
# Rewrites the harness's tool_status in its own process so the reply lists
# no instruction but one criterion that holds. The validator indexed the
# instructions by the criteria's positions and panicked, which ended the
# whole spade process (every validation of the round with it).
import sys

from spade_env import ToolUseEnv

H = sys.modules["spade_harness"]
real = H.tool_status


def tool_status(env):
    status = real(env)
    status["instructions"] = []
    status["criteria"] = [True]
    return status


H.tool_status = tool_status


class Shop(ToolUseEnv):
    name, skill, max_turns = "shop", "planning", 5
    tools = [
        {
            "name": "buy",
            "description": "Buy one item.",
            "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
        }
    ]

    def initial_state(self):
        return {"cart": []}

    def instructions(self):
        return [
            ("Put an apple in the cart.", lambda s: "apple" in s["cart"]),
            ("Put a pear in the cart.", lambda s: "pear" in s["cart"]),
            ("Put a fig in the cart.", lambda s: "fig" in s["cart"]),
        ]

    def tool_buy(self, item):
        self.state["cart"].append(item)
        return f"added {item}"

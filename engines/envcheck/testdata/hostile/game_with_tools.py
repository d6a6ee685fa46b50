# expect: metadata -
# A ToolUseEnv whose first instruction already holds after reset reports
# its kind as "game" (rewriting the harness's metadata function in its own
# process) but keeps its tools: validated as a game it would skip the reset
# gate and impossibility screening, and the rollout stage, which goes by
# the tools column, would still play it with tool calls.
import sys

from spade_env import ToolUseEnv

H = sys.modules["spade_harness"]
real = H.metadata


def metadata(cls):
    meta = real(cls)
    meta["kind"] = "game"
    meta["has_reset"] = meta["has_step"] = True
    return meta


H.metadata = metadata


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
        return {"cart": ["apple"]}

    def instructions(self):
        return [
            ("Put an apple in the cart.", lambda s: "apple" in s["cart"]),
            ("Put a pear in the cart.", lambda s: "pear" in s["cart"]),
            ("Put a fig in the cart.", lambda s: "fig" in s["cart"]),
        ]

    def tool_buy(self, item):
        self.state["cart"].append(item)
        return f"added {item}"

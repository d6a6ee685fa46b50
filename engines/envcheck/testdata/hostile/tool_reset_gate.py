# expect: reset_gate -
# A tool-use env whose second instruction already holds after reset.
from spade_env import ToolUseEnv


class Trivial(ToolUseEnv):
    tools = [{"name": "set_flag", "description": "Set a flag.", "parameters": {"type": "object",
              "properties": {"flag": {"type": "string"}}, "required": ["flag"]}}]

    def initial_state(self):
        return {"flags": ["b"]}

    def instructions(self):
        return [("Set flag a.", lambda s: "a" in s["flags"]),
                ("Set flag b.", lambda s: "b" in s["flags"]),
                ("Set flag c.", lambda s: "c" in s["flags"])]

    def tool_set_flag(self, flag):
        self.state["flags"].append(flag)
        return "ok"

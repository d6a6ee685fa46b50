# expect: reset_gate -
# A tool-use env with an empty instruction list: nothing to check is a failure.
from spade_env import ToolUseEnv


class Empty(ToolUseEnv):
    tools = [{"name": "noop", "description": "Do nothing.", "parameters": {"type": "object", "properties": {}}}]

    def instructions(self):
        return []

    def tool_noop(self):
        return "ok"

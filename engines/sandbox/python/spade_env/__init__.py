"""spade_env: the contract between SPADE environment designers and the pipeline.

An environment is a Python class (standard library only) that the designer
model writes and the pipeline runs inside the sandbox.  The API follows
Gymnasium's text-environment conventions:

    reset(seed) -> (observation: str, info: dict)
    step(action: str) -> (observation: str, reward: float,
                          terminated: bool, truncated: bool, info: dict)

Two base classes are provided:

* ``Env``: any single- or multi-turn text game.  Subclasses set the class
  attributes (name, skill, max_turns, reward_range) and implement reset/step,
  calling ``super().reset(seed)`` first so that ``self.rng`` is a
  ``random.Random(seed)`` and episodes are reproducible.
* ``ToolUseEnv``: the tool-use template (docs/method.md step 3).  Subclasses declare
  ``tools`` (JSON Schema parameters), implement ``initial_state``,
  ``instructions`` and one ``tool_<name>`` method per tool; the base class
  implements reset/step, argument validation, instruction gating and rewards.

Rules every environment follows (the validator checks them; see
docs/environment-contract.md):

* Observations are text and list the valid actions, e.g. a final line
  ``Valid actions: a | b | c``.
* Malformed actions get feedback text and (usually) reward 0; they never raise.
* Rewards are finite floats inside ``reward_range``.
* The episode ends within ``max_turns`` steps; the harness truncates after it.
* The final step's info may carry ``"success": bool``.  A play counts as a win
  when it ends with ``info["success"] is True``; when an environment never
  reports success, a positive return counts as a win.
* Same seed, same actions -> same observations (use ``self.rng``, never the
  clock or unseeded randomness).
"""

from __future__ import annotations

import json
import math
import random

# Annotations are never evaluated (postponed by the __future__ import), so
# typing is not imported: it would add milliseconds to every sandbox start.

__all__ = [
    "Env",
    "ToolUseEnv",
    "SKILLS",
    "valid_actions_line",
    "validate_arguments",
]

__version__ = "1.0"

# The six cognitive-skill categories of the skill curriculum (docs/method.md step 2).
# ``Env.skill`` should be one of these; free text is accepted.
SKILLS = (
    "logical_deduction",
    "spatial_reasoning",
    "causal_inference",
    "planning",
    "pattern_induction",
    "quantitative_reasoning",
)


def valid_actions_line(actions) -> str:
    """Return the conventional ``Valid actions: a | b | c`` observation line."""
    return "Valid actions: " + " | ".join(str(a) for a in actions)


class Env:
    """Base class. Designer subclasses set class attributes and implement reset/step."""

    name: str = ""  # short env name
    skill: str = ""  # one of SKILLS (free text accepted)
    max_turns: int = 15  # turn limit; the harness truncates after it
    reward_range: tuple[float, float] = (0.0, 1.0)

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        """Start an episode.

        Subclasses call ``super().reset(seed)`` first: it seeds ``self.rng``
        (a ``random.Random``) so that the same seed gives the same episode.
        Returns ``(observation, info)``.
        """
        self.rng = random.Random(seed)
        return "", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        """Apply one text action.

        Returns ``(observation, reward, terminated, truncated, info)``.
        ``terminated`` means the episode reached a natural end (win or loss);
        ``truncated`` means it was cut off (turn limit).
        """
        raise NotImplementedError(f"{type(self).__name__}.step is not implemented")


# JSON Schema "type" names -> Python predicates.  bool is a subclass of int in
# Python, so it is excluded from number/integer explicitly.
_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float))
    and not isinstance(v, bool)
    and math.isfinite(v),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def validate_arguments(schema: dict, arguments: Any) -> str | None:
    """Check tool-call arguments against a JSON Schema object (a basic subset).

    Checked: arguments is an object; required keys present; no keys outside
    ``properties``; each value's ``type`` (a name or list of names) and
    ``enum``.  Returns None when valid, else a one-line reason for the agent.
    """
    if not isinstance(arguments, dict):
        return "arguments must be a JSON object"
    props = schema.get("properties") or {}
    for key in schema.get("required") or []:
        if key not in arguments:
            return f"missing required argument '{key}'"
    for key, value in arguments.items():
        if key not in props:
            allowed = ", ".join(sorted(props)) or "none"
            return f"unknown argument '{key}' (allowed: {allowed})"
        spec = props[key] or {}
        want = spec.get("type")
        if want is not None:
            names = want if isinstance(want, list) else [want]
            if not any(_JSON_TYPES.get(n, lambda v: True)(value) for n in names):
                return f"argument '{key}' must be of type {'/'.join(names)}"
        if "enum" in spec and value not in spec["enum"]:
            return f"argument '{key}' must be one of {spec['enum']}"
    return None


def _strip_fences(text: str) -> str:
    """Remove a surrounding Markdown code fence, which models often add."""
    t = text.strip()
    if t.startswith("```"):
        first_nl = t.find("\n")
        t = t[first_nl + 1 :] if first_nl >= 0 else t[3:]
        if t.rstrip().endswith("```"):
            t = t.rstrip()[:-3]
    return t.strip()


class ToolUseEnv(Env):
    """Tool-use base (docs/method.md step 3): tools with JSON-schema parameters mutate backend state; 3-5 user
    instructions are revealed one at a time; each advances only when its state criterion holds; 'done' ends.

    Subclasses provide:

    * ``tools``: ``[{"name": ..., "description": ..., "parameters": {JSON Schema object}}]``
    * ``initial_state(self) -> dict``: the backend state (use ``self.rng``).
      It must define every key the criteria read.
    * ``instructions(self) -> list[tuple[str, Callable[[dict], bool]]]``: 3-5
      ``(text, criterion(state))`` pairs, in the order they are revealed.
    * ``tool_<name>(self, **arguments) -> str`` per tool, mutating ``self.state``.
    * optionally ``solution(self) -> list[str]``: actions that complete every
      instruction from the current reset; the validator replays it to prove
      the task is reachable (impossibility screening).

    Actions are JSON text ``{"name": tool, "arguments": {...}}`` (a Markdown
    code fence around it is tolerated) or ``done``.  Each completed
    instruction gives reward 1/n (1.0 in total); the episode terminates when
    all are done (``success`` True) or on ``done`` (``success`` iff all done),
    and truncates at ``max_turns`` (``success`` False).
    """

    tools: list[dict] = []

    def initial_state(self) -> dict:
        """Build the backend state for a new episode (use ``self.rng``)."""
        return {}

    def instructions(self) -> list[tuple[str, Callable[[dict], bool]]]:
        """Return the 3-5 ``(text, criterion)`` user instructions, in order."""
        return []

    def solution(self) -> list[str] | None:
        """Optional reference actions that solve the episode just reset."""
        return None

    # -- harness and validator helpers (not for designers to override) ------

    def criteria_status(self) -> list[bool]:
        """Evaluate every instruction's criterion on the current state.

        A criterion that raises counts as False.  The validator uses this for
        the reset gate: right after reset, no criterion may already hold.
        """
        out = []
        for _, crit in self._spade_instructions:
            try:
                out.append(bool(crit(self.state)))
            except Exception:
                out.append(False)
        return out

    def _tool_lines(self) -> list[str]:
        lines = []
        for tool in self.tools:
            params = (tool.get("parameters") or {}).get("properties") or {}
            required = set((tool.get("parameters") or {}).get("required") or [])
            args = ", ".join(
                f"{k}: {(v or {}).get('type', 'any')}{'' if k in required else '?'}"
                for k, v in params.items()
            )
            lines.append(f"- {tool.get('name')}({args}): {tool.get('description', '')}")
        return lines

    def _current_instruction_text(self) -> str:
        n = len(self._spade_instructions)
        i = self._spade_done
        if i >= n:  # no instructions at all: the validator rejects such an env
            return "There are no instructions."
        return f"Instruction {i + 1} of {n}: {self._spade_instructions[i][0]}"

    def _info(self, **extra) -> dict:
        info = {
            "completed": self._spade_done,
            "total": len(self._spade_instructions),
            "turn": self._spade_turn,
        }
        info.update(extra)
        return info

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        super().reset(seed)
        self.state = self.initial_state()
        self._spade_instructions = list(self.instructions())
        self._spade_done = 0
        self._spade_turn = 0
        self._spade_over = False
        obs = "\n".join(
            [
                "You operate a backend system through tools. Each turn, call exactly one tool by replying with JSON:",
                '{"name": "<tool>", "arguments": {...}}',
                'Reply "done" when you have finished every instruction.',
                "",
                "Tools:",
                *self._tool_lines(),
                "",
                self._current_instruction_text(),
                valid_actions_line(['{"name": ..., "arguments": {...}}', "done"]),
            ]
        )
        return obs, self._info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if getattr(self, "_spade_over", True):
            return "The episode is over; call reset().", 0.0, True, False, self._info()
        self._spade_turn += 1
        n = len(self._spade_instructions)
        text = _strip_fences(action if isinstance(action, str) else str(action))
        reward = 0.0
        terminated = False
        extra: dict[str, Any] = {}

        if text.lower() in ("done", '"done"'):
            terminated = True
            success = self._spade_done == n
            obs = f"Session ended. Completed {self._spade_done} of {n} instructions."
            extra["success"] = success
        else:
            obs, ok = self._dispatch(text, extra)
            if ok and self._spade_done < n:
                try:
                    holds = bool(self._spade_instructions[self._spade_done][1](self.state))
                except Exception as exc:  # a broken criterion never crashes the episode
                    holds = False
                    extra["criterion_error"] = f"{type(exc).__name__}: {exc}"
                if holds:
                    self._spade_done += 1
                    reward = 1.0 / n
                    if self._spade_done == n:
                        terminated = True
                        extra["success"] = True
                        obs += f"\nInstruction {n} of {n} completed. All instructions are complete."
                    else:
                        obs += f"\nInstruction {self._spade_done} of {n} completed.\n" + self._current_instruction_text()
            if not terminated:
                obs += "\n" + valid_actions_line(['{"name": ..., "arguments": {...}}', "done"])

        truncated = False
        if not terminated and self._spade_turn >= self.max_turns:
            truncated = True
            extra["success"] = False
            obs += "\nTurn limit reached."
        if terminated or truncated:
            self._spade_over = True
        return obs, reward, terminated, truncated, self._info(**extra)

    def _dispatch(self, text: str, extra: dict) -> tuple[str, bool]:
        """Parse, validate and run one tool call; returns (feedback, ran)."""
        try:
            call = json.loads(text)
        except (ValueError, RecursionError) as exc:
            extra["error"] = "invalid_json"
            return f'Invalid action: expected a JSON tool call {{"name": ..., "arguments": {{...}}}} or "done" ({exc}).', False
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            extra["error"] = "invalid_call"
            return 'Invalid action: a tool call is a JSON object with a string "name" and an "arguments" object.', False
        name = call["name"]
        tool = next((t for t in self.tools if t.get("name") == name), None)
        method = getattr(self, "tool_" + name, None) if tool is not None else None
        if tool is None or not callable(method):
            extra["error"] = "unknown_tool"
            names = ", ".join(str(t.get("name")) for t in self.tools)
            return f"Unknown tool '{name}'. Available tools: {names}.", False
        args = call.get("arguments", {})
        if isinstance(args, str):  # OpenAI wire format carries arguments as JSON text
            try:
                args = json.loads(args) if args.strip() else {}
            except ValueError:
                args = None
        reason = validate_arguments(tool.get("parameters") or {}, args)
        if reason is not None:
            extra["error"] = "invalid_arguments"
            return f"Invalid arguments for {name}: {reason}.", False
        extra["tool"] = name
        try:
            result = method(**args)
        except Exception as exc:  # tool-level failures are feedback, not crashes
            extra["tool_error"] = f"{type(exc).__name__}: {exc}"
            return f"Error from {name}: {exc}", True
        return (result if isinstance(result, str) else json.dumps(result, default=str)), True

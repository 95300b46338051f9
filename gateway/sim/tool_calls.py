"""Forced tool calls: a request whose `tool_choice` forces a function is answered with a call.

Which function each API's `tool_choice` forces:
    chat/completions  {"type": "function", "function": {"name": N}}, or "required": the first tool
    Responses         {"type": "function", "name": N}, or "required": the first tool
    Messages          {"type": "tool", "name": N}, or {"type": "any"}: the first tool
Anything else ("auto", "none", no tools) gets the usual text answer. Anthropic's `tool_use`
block carries the same object as `input`.

The call's arguments are the answer's text as a JSON object, `{"text": "<output text>"}`, so
the token count and the timing stay those of a text answer: output token i streams as one
piece of the arguments, the first piece opening the object and the last one closing it.
"""

from __future__ import annotations

import json
from typing import Any, Literal

ToolApi = Literal["chat", "responses", "messages"]
_OPEN = '{"text": "'
_CLOSE = '"}'


def forced_tool(body: dict[str, Any], api: ToolApi) -> str | None:
    """The name of the function `body` forces, or None."""
    choice = body.get("tool_choice")
    if choice in ("required", {"type": "any"}):
        return _first_tool(body.get("tools"), api)
    if not isinstance(choice, dict):
        return None
    if api == "chat" and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
    elif choice.get("type") == ("tool" if api == "messages" else "function"):
        name = choice.get("name")
    else:
        return None
    return name if isinstance(name, str) and name else None


def _first_tool(tools: Any, api: ToolApi) -> str | None:
    if not isinstance(tools, list) or not tools or not isinstance(tools[0], dict):
        return None
    tool = tools[0]
    if api == "chat" and isinstance(tool.get("function"), dict):
        tool = tool["function"]
    name = tool.get("name")
    return name if isinstance(name, str) and name else None


def arguments(text: str) -> str:
    """The whole arguments of a call whose answer text is `text`."""
    return json.dumps({"text": text})


def arguments_piece(token: str, first: bool, last: bool) -> str:
    """One output token's text as a piece of the arguments; the pieces join to `arguments`."""
    piece = _OPEN + token if first else token
    return piece + _CLOSE if last else piece

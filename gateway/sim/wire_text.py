"""What the simulated Responses and Messages wires share: named SSE events, and the chars/4
token estimate of a list of texts."""

from __future__ import annotations

import json
from typing import Any


def event_frame(name: str, payload: dict[str, Any]) -> bytes:
    """One named SSE event, as OpenAI and Anthropic send them (compact JSON)."""
    data = json.dumps(payload, separators=(",", ":"))
    return f"event: {name}\ndata: {data}\n\n".encode()


def text_tokens(texts: list[str]) -> int:
    return sum(len(text) for text in texts) // 4

"""The SSE stream grammar: events framed whole, the gateway's error event, and `StreamWatch`.

`whole_events` splits what has arrived after its last complete event, so the relay sends only
whole events and holds a partial one back until its end arrives. An SSE parser acts on an event
only at its end (a blank line), so this changes nothing a client sees, and on an upstream cut the
partial event is dropped before the gateway's `error_event`: glued to a partial line, the error
would be part of that line and no parser would see it.

`StreamWatch` reads a relayed stream without re-encoding it: it finds the first content token,
counts content events, picks up `usage`, and notices whether the stream ended properly. Only
events up to the first content token are JSON-parsed, plus events that mention "usage" or
"error"; every other event costs a regex search, and a chunk of routine events a few substring
counts. The bytes go to the client as received (minus secrets: gateway/upstream/redaction.py).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

_DONE = b"data: [DONE]"
EVENT_END = b"\n\n"  # what OpenAI-compatible servers end each event with
# Every blank line that can end an event: LF, CRLF and CR line endings.
_EVENT_ENDS = (EVENT_END, b"\r\n\r\n", b"\r\r")
# A non-empty string value for "content" or "text", or any tool-call delta.
_CONTENT = re.compile(rb'"(?:content|text)":\s*"(?!")|"tool_calls":\s*\[')


@dataclass(slots=True)
class StreamWatch:
    started_s: float
    first_token_s: float | None = None
    last_token_s: float | None = None
    content_events: int = 0
    usage: dict[str, Any] | None = None
    done: bool = False
    upstream_error: bool = False
    _pending: bytes = field(default=b"", repr=False)

    def feed(self, chunk: bytes) -> bool:
        """True when `chunk` was whole routine events (see `routine_events`): nothing in it
        mentions an error, usage or [DONE], so the relay needs no closer look at it either."""
        if self.first_token_s is not None and not self._pending:
            events = routine_events(chunk)
            if events:
                self._count(time.perf_counter(), events)
                return True
        parts = (self._pending + chunk).split(b"\n\n")
        self._pending = parts.pop()
        now = time.perf_counter()
        for event in parts:
            self._event(event.strip(), now)
        return False

    def _event(self, event: bytes, now: float) -> None:
        if not event.startswith(b"data:"):
            return
        if event.startswith(_DONE):
            self.done = True
            return
        if self.first_token_s is None or b'"usage"' in event or b'"error"' in event:
            self._parse(event[5:], now)
        elif _CONTENT.search(event):
            self._count(now)

    def _parse(self, payload: bytes, now: float) -> None:
        try:
            body = json.loads(payload)
        except ValueError:
            return
        if not isinstance(body, dict):
            return
        if isinstance(body.get("usage"), dict):
            self.usage = body["usage"]
        if "error" in body:
            self.upstream_error = True
        if _has_content(body):
            self._count(now)

    def _count(self, now: float, events: int = 1) -> None:
        if self.first_token_s is None:
            self.first_token_s = now
        self.last_token_s = now
        self.content_events += events

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.started_s

    @property
    def output_tokens(self) -> int:
        if self.usage and isinstance(self.usage.get("completion_tokens"), int):
            return int(self.usage["completion_tokens"])
        return self.content_events

    @property
    def tpot_s(self) -> float | None:
        tokens = self.output_tokens
        if self.first_token_s is None or self.last_token_s is None or tokens < 2:
            return None
        return (self.last_token_s - self.first_token_s) / (tokens - 1)


def routine_events(chunk: bytes) -> int:
    """The content events in a chunk of the common shape, else 0: whole one-line events, each
    with exactly one non-empty content, text or tool-call field, none of them [DONE] or one
    that mentions usage or an error. Substring counts, no regex and no split: most chunks of a
    stream take this path once its first token is seen."""
    events = chunk.count(b"\n\n")
    if not events or not chunk.endswith(b"\n\n") or chunk.count(b"\n") != 2 * events:
        return 0
    if b'"usage"' in chunk or b'"error"' in chunk or b"[DONE]" in chunk:
        return 0
    hits = (
        chunk.count(b'"content":"')
        - chunk.count(b'"content":""')
        + chunk.count(b'"text":"')
        - chunk.count(b'"text":""')
        + chunk.count(b'"tool_calls":[')
    )
    return events if hits == events else 0


def _has_content(body: dict[str, Any]) -> bool:
    for choice in body.get("choices") or ():
        if not isinstance(choice, dict):
            continue
        delta = choice.get("delta")
        if isinstance(delta, dict) and (delta.get("content") or delta.get("tool_calls")):
            return True
        if choice.get("text"):
            return True
    return False


def whole_events(data: bytes) -> tuple[bytes, bytes]:
    """`data` split after its last complete event: (the whole events, the partial one)."""
    end = max(_after(data, blank) for blank in _EVENT_ENDS)
    return data[:end], data[end:]


def _after(data: bytes, blank: bytes) -> int:
    at = data.rfind(blank)
    return at + len(blank) if at >= 0 else 0


def error_event(message: str, code: str) -> bytes:
    """The gateway's own error event, after which the stream ends without [DONE]."""
    body = {"error": {"message": message, "type": "upstream_error", "param": None, "code": code}}
    return b"data: " + json.dumps(body).encode() + b"\n\n"

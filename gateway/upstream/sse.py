"""The chat/completions grammar: watch a relayed SSE stream without re-encoding it, find the
first content token, count content events, pick up `usage`, notice whether the stream ended
with `[DONE]`, and restamp `model` (every chunk carries it) with the public name.

Only events up to the first content token are JSON-parsed, plus events that mention "usage",
"error" or a finish; after the first token a run of routine events (one content field each)
costs a few substring counts per read, whether it fills the read or comes before the stream's
end in it (reads coalesce under load), and any other event a regex search; when the model is
restamped, a read costs one `bytes.replace` with the upstream's `"model":"..."` bytes as its
first event spelt them. The stream commits with its first bytes.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.upstream.grammar import (
    MODEL_FIELD,
    EventWatch,
    Facts,
    Grammar,
    cached_tokens,
    dumps,
    dumps_value,
    joined,
    number,
)

_DONE = b"data: [DONE]"


_FINISH = b'"finish_reason":"'
_FINISH_SPACED = b'"finish_reason": "'


def _finishes(data: bytes) -> bool:
    """A choice's last chunk: a finish_reason that is a string (`null` on every other chunk),
    any choice's, in compact JSON or with a space after the colon."""
    return _FINISH in data or _FINISH_SPACED in data


# A non-empty string value for "content" or "text", or any tool-call delta.
_CONTENT = re.compile(rb'"(?:content|text)":\s*"(?!")|"tool_calls":\s*\[')


@dataclass(slots=True)
class StreamWatch(EventWatch):
    usage: dict[str, Any] | None = None
    _old_model: bytes | None = None  # the upstream's `"model":"..."`, once learnt
    _new_model: bytes = b""

    @property
    def committed(self) -> bool:
        return True

    def feed(self, chunk: bytes) -> bytes:
        if self.first_token_s is not None and not self._pending:
            events = routine_events(chunk)
            if events:  # the common read once the first token is out: counts only
                self._token(time.perf_counter(), events=events)
                return self._restamped(chunk)
        parts = self._split(chunk)
        now = time.perf_counter()
        for at, event in enumerate(parts):
            if self.first_token_s is not None:  # the rest of the read, as a later read
                self._after_first(parts[at:], now)
                break
            self._event(event.strip(), now)
        return self._restamped(joined(parts))

    def _after_first(self, parts: list[bytes], now: float) -> None:
        """Whole events after the first token: counted at once where routine (all of them, or
        those before the stream's end), the others read one by one. Under load a stream's
        reads coalesce, so most of its events arrive in the read of its first token or in
        the read that ends it, not in routine reads of their own."""
        counted = routine_head(joined(parts))
        if counted:
            self._token(now, events=counted)
        for event in parts[counted:]:  # a routine event is one content event
            self._event(event.strip(), now)

    def _restamped(self, events: bytes) -> bytes:
        old = self._old_model
        return events if old is None else events.replace(old, self._new_model)

    def _event(self, event: bytes, now: float) -> None:
        if not event.startswith(b"data:"):
            return
        if event.startswith(_DONE):
            self.done = True
            return
        if (
            self.first_token_s is None
            or b'"usage"' in event
            or b'"error"' in event
            or _finishes(event)
        ):
            self._parse(event, now)
        elif _CONTENT.search(event):
            self._token(now)

    def _parse(self, event: bytes, now: float) -> None:
        try:
            body = json.loads(event[5:])
        except ValueError:
            return
        if not isinstance(body, dict):
            return
        if self.public_model is not None and self._old_model is None:
            self._learn_model(event)
        if self.described.upstream_id is None or _finishes(event):
            self._describe(body)
        if isinstance(body.get("usage"), dict):
            self.usage = body["usage"]
            self.reported_prompt_tokens = number(self.usage.get("prompt_tokens"))
            self.reported_output_tokens = number(self.usage.get("completion_tokens"))
            self.reported_cached_tokens = cached_tokens(self.usage)
        if "error" in body:
            self.upstream_error = True
        if _has_content(body):
            self._token(now)

    def _learn_model(self, event: bytes) -> None:
        found = MODEL_FIELD.search(event)
        if found is None or self.public_model is None:
            return
        new = b'"model":' + dumps_value(self.public_model)
        if found.group() != new:
            self._old_model, self._new_model = found.group(), new

    def error_event(self, message: str, code: str) -> bytes:
        return error_event(message, code)


def routine_events(chunk: bytes) -> int:
    """The content events in a chunk of the common shape, else 0: whole one-line events, each
    with exactly one non-empty content, text or tool-call field, none of them [DONE] or one
    that mentions usage or an error. Substring counts, no regex and no split: most chunks of a
    stream take this path once its first token is seen."""
    # `_ENDING`, spelt out: a loop over the tuple costs a tenth more on this per-read path
    if (
        b'"usage"' in chunk
        or b'"error"' in chunk
        or b"[DONE]" in chunk
        or _FINISH in chunk
        or _FINISH_SPACED in chunk
    ):
        return 0
    return _content_events(chunk)


# What ends the routine events of a stream, as substrings: `routine_events` tests them all,
# `routine_head` finds the first (tests/unit/test_sse_watch.py holds the two to one list).
_ENDING = (b'"usage"', b'"error"', b"[DONE]", _FINISH, _FINISH_SPACED)


def routine_head(events: bytes) -> int:
    """The content events of the routine events (`routine_events`) that whole `events` start
    with, up to the first that mentions a finish, usage or an error, or is [DONE] (all of them
    when none does), else 0."""
    ends = [at for marker in _ENDING if (at := events.find(marker)) >= 0]
    cut = events.rfind(b"\n\n", 0, min(ends)) + 2 if ends else len(events)
    return _content_events(events[:cut]) if cut > 2 else 0


def _content_events(chunk: bytes) -> int:
    """`routine_events` but for its test of what ends a stream, which the caller made."""
    events = chunk.count(b"\n\n")
    if not events or not chunk.endswith(b"\n\n") or chunk.count(b"\n") != 2 * events:
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


def error_event(message: str, code: str) -> bytes:
    body = {"error": {"message": message, "type": "upstream_error", "param": None, "code": code}}
    return b"data: " + dumps(body) + b"\n\n"


def chat_facts(body: Mapping[str, Any]) -> Facts:
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return Facts()
    prompt, output = number(usage.get("prompt_tokens")), number(usage.get("completion_tokens"))
    return Facts(prompt, output, None, cached_tokens(usage))


CHAT = Grammar("chat", StreamWatch, chat_facts)

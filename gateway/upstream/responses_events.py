"""The OpenAI Responses grammar: typed events (`event: <type>` / `data: {"type", ...,
"sequence_number"}`), response.created and .in_progress first, deltas, then one terminal event
(response.completed, .incomplete or .failed); no `[DONE]` (a stray one is relayed and ignored).

    first token   the first non-empty response.output_text.delta; reasoning, reasoning summary,
                  function-call argument and refusal deltas are tokens of another kind
    usage         the terminal event's `response.usage` (input_tokens, output_tokens)
    complete      a terminal event; `error` or response.failed is the upstream's failure
    model         restamped in response.created, .in_progress and the terminal event, the only
                  events that carry the response object (re-encoded: a few per stream)
    mid-stream    an `error` event (flat fields, as the SDK's type has them, and a nested
                  `error`, on which openai-python raises), then response.failed with the created
                  snapshot, continuing the upstream's sequence numbers

A chunk whose events are all text deltas (most of a stream) costs two substring counts; other
events are parsed one by one.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.upstream.grammar import (
    EventWatch,
    Facts,
    Grammar,
    cached_tokens,
    data_of,
    frame,
    joined,
    number,
    parsed,
    with_data,
)

_TEXT_DELTA = b'"type":"response.output_text.delta"'
_EMPTY_DELTA = b'"delta":""'
TEXT = "response.output_text.delta"
OTHER_TOKENS = frozenset(
    {
        "response.reasoning_text.delta",
        "response.reasoning_summary_text.delta",
        "response.function_call_arguments.delta",
        "response.refusal.delta",
    }
)
OPENING = frozenset({"response.created", "response.in_progress"})
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_SEQUENCE = re.compile(rb'"sequence_number":\s*(\d+)')
# Response error codes that say the upstream failed (others are the request's fault).
_FAILURE_CODES = {"server_error": 500, "rate_limit_exceeded": 429}


@dataclass(slots=True)
class ResponsesWatch(EventWatch):
    snapshot: dict[str, Any] | None = None  # the response as response.created described it
    _last: bytes = b""  # the last whole events sent, for the last sequence number

    def feed(self, chunk: bytes) -> bytes:
        if self.first_token_s is not None and not self._pending:
            deltas = _routine(chunk)
            if deltas:
                self._token(time.perf_counter(), events=deltas)
                self._last = chunk
                return chunk
        parts = self._split(chunk)
        now = time.perf_counter()
        out = joined([self._event(event, now) for event in parts])
        if out:
            self._last = out
        return out

    def _event(self, event: bytes, now: float) -> bytes:
        body = parsed(data_of(event))
        if body is None:
            return event
        kind = body.get("type")
        if kind == TEXT or kind in OTHER_TOKENS:
            if body.get("delta"):
                self._token(now, text=kind == TEXT)
        elif kind in OPENING or kind in TERMINAL:
            return self._response_event(event, body, kind)
        elif kind == "error":
            self._error(body.get("code") or _nested_code(body))
        return event

    def _response_event(self, event: bytes, body: dict[str, Any], kind: str) -> bytes:
        response = body.get("response")
        if not isinstance(response, dict):
            return event
        self._describe(response, None if kind in TERMINAL else ())  # terminal: its status
        if kind in OPENING:
            self.snapshot = response
            if isinstance(response.get("id"), str):
                self.response_id = response["id"]
        else:
            self._terminal(response, kind)
        if self.public_model is None or response.get("model") == self.public_model:
            return event
        response["model"] = self.public_model
        return with_data(event, body)

    def _terminal(self, response: dict[str, Any], kind: str) -> None:
        self.done = True
        facts = responses_facts(response)
        self.reported_prompt_tokens = facts.prompt_tokens
        self.reported_output_tokens = facts.output_tokens
        self.reported_cached_tokens = facts.cached_tokens
        if kind == "response.failed":
            error = response.get("error")
            self._error(error.get("code") if isinstance(error, dict) else None)

    def _error(self, code: object) -> None:
        self.upstream_error = True
        self.error_status = error_status(code)

    def error_event(self, message: str, code: str) -> bytes:
        sequence = self._last_sequence() + 1
        fields: dict[str, Any] = {"code": "server_error", "message": message, "param": None}
        flat = {"type": "error", "sequence_number": sequence, **fields}
        flat["error"] = {"type": "server_error", **fields}
        failed = dict(self.snapshot or {})
        if self.public_model is not None and failed:
            failed["model"] = self.public_model
        failed |= {"status": "failed", "error": {"code": "server_error", "message": message}}
        return frame("error", flat) + frame(
            "response.failed",
            {"type": "response.failed", "sequence_number": sequence + 1, "response": failed},
        )

    def _last_sequence(self) -> int:
        found = _SEQUENCE.findall(self._last)
        return int(found[-1]) if found else -1


def error_status(code: object) -> int:
    """The HTTP status an error event's code stands for: OpenAI's codes, an HTTP status as
    some servers send it (vLLM: 500 or "500"), else a client error (relayed, not failed over)."""
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    if isinstance(code, int) and not isinstance(code, bool):
        return code if 400 <= code <= 599 else 500
    if code is None:
        return 500
    return _FAILURE_CODES.get(code, 400) if isinstance(code, str) else 500


def _routine(chunk: bytes) -> int:
    """The text deltas in a chunk made only of whole text-delta events, else 0."""
    events = chunk.count(b"\n\n")
    if not events or not chunk.endswith(b"\n\n") or chunk.count(_TEXT_DELTA) != events:
        return 0
    return events - chunk.count(_EMPTY_DELTA)


def _nested_code(body: Mapping[str, Any]) -> object:
    error = body.get("error")
    return error.get("code") if isinstance(error, dict) else None


def responses_facts(body: Mapping[str, Any]) -> Facts:
    """Usage and id of a response object (a whole answer, or a terminal event's response)."""
    usage = body.get("usage")
    response_id = body.get("id") if isinstance(body.get("id"), str) else None
    if not isinstance(usage, dict):
        return Facts(response_id=response_id)
    prompt, output = number(usage.get("input_tokens")), number(usage.get("output_tokens"))
    return Facts(prompt, output, response_id, cached_tokens(usage))


RESPONSES = Grammar("responses", ResponsesWatch, responses_facts)

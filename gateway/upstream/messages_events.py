"""The Anthropic Messages grammar: message_start, then (content_block_start,
content_block_delta*, content_block_stop)*, message_delta, message_stop; `ping` anywhere;
`event: error` for a failure (the SDK raises on it, with the stream's 200 status).

    first token   the first non-empty text_delta; thinking_delta and input_json_delta are
                  tokens of another kind
    usage         prompt tokens from message_start.message.usage (input_tokens +
                  cache_creation_input_tokens + cache_read_input_tokens); output tokens from the
                  last message_delta.usage.output_tokens, which is cumulative. vLLM reports both
                  in message_delta, which is read as well
    complete      message_stop only
    model         restamped in message_start.message.model, the only event that carries it
    mid-stream    `event: error` with an api_error, and no message_stop after it

A chunk whose events are all content_block_delta (most of a stream) costs three substring
counts; other events are parsed one by one.
"""

from __future__ import annotations

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

_DELTA = b'"type":"content_block_delta"'
_EMPTY = (b'"text":""', b'"partial_json":""', b'"thinking":""')
_TOKEN_FIELDS = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "input_json_delta": "partial_json",
}
# Anthropic's error types that say the upstream failed, as the HTTP statuses they stand for.
FAILURE_TYPES = {
    "overloaded_error": 529,
    "api_error": 500,
    "rate_limit_error": 429,
    "timeout_error": 504,
}


@dataclass(slots=True)
class MessagesWatch(EventWatch):
    def feed(self, chunk: bytes) -> bytes:
        if self.first_token_s is not None and not self._pending:
            deltas = _routine(chunk)
            if deltas:
                self._token(time.perf_counter(), events=deltas)
                return chunk
        parts = self._split(chunk)
        now = time.perf_counter()
        return joined([self._event(event, now) for event in parts])

    def _event(self, event: bytes, now: float) -> bytes:
        body = parsed(data_of(event))
        if body is None:
            return event
        kind = body.get("type")
        if kind == "content_block_delta":
            self._delta(body.get("delta"), now)
        elif kind == "message_start":
            return self._start(event, body)
        elif kind == "message_delta":
            self._usage(body.get("usage"))
            delta = body.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self._describe({}, (delta["stop_reason"],))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            error = body.get("error")
            error_type = error.get("type") if isinstance(error, dict) else None
            self.upstream_error = True
            self.error_status = FAILURE_TYPES.get(error_type, 400) if error_type else 500
        return event

    def _delta(self, delta: object, now: float) -> None:
        if not isinstance(delta, dict):
            return
        kind = delta.get("type")
        name = _TOKEN_FIELDS.get(kind) if isinstance(kind, str) else None
        if name is not None and delta.get(name):
            self._token(now, text=kind == "text_delta")

    def _start(self, event: bytes, body: dict[str, Any]) -> bytes:
        message = body.get("message")
        if not isinstance(message, dict):
            return event
        self._describe(message)
        usage = message.get("usage")  # its output_tokens is a placeholder: message_delta counts
        if isinstance(usage, dict) and prompt_tokens(usage):
            self.reported_prompt_tokens = prompt_tokens(usage)
            self.reported_cached_tokens = number(usage.get("cache_read_input_tokens"))
        if self.public_model is None or message.get("model") == self.public_model:
            return event
        message["model"] = self.public_model
        return with_data(event, body)

    def _usage(self, usage: object) -> None:
        if not isinstance(usage, dict):
            return
        prompt = prompt_tokens(usage)
        if prompt:
            self.reported_prompt_tokens = prompt
            self.reported_cached_tokens = cached_tokens(usage)
        output = number(usage.get("output_tokens"))
        if output is not None:
            self.reported_output_tokens = output

    def error_event(self, message: str, code: str) -> bytes:
        return frame("error", error_payload("api_error", message))


def _routine(chunk: bytes) -> int:
    """The non-empty deltas in a chunk made only of whole content_block_delta events, else 0."""
    events = chunk.count(b"\n\n")
    if not events or not chunk.endswith(b"\n\n") or chunk.count(_DELTA) != events:
        return 0
    return events - sum(chunk.count(empty) for empty in _EMPTY)


def error_payload(error_type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def prompt_tokens(usage: Mapping[str, Any]) -> int | None:
    """Input tokens, cache writes and cache reads: all of the prompt."""
    parts = [
        number(usage.get(key))
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    ]
    known = [part for part in parts if part is not None]
    return sum(known) if known else None


def messages_facts(body: Mapping[str, Any]) -> Facts:
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return Facts()
    output = number(usage.get("output_tokens"))
    return Facts(prompt_tokens(usage), output, None, cached_tokens(usage))


MESSAGES = Grammar("messages", MessagesWatch, messages_facts)

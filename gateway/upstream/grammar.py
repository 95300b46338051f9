"""The stream grammar of a client API: how the relay and the outcome recorder read one API's
answers without re-encoding them.

Three APIs, three grammars behind one protocol (`StreamGrammar`):
    sse.py               OpenAI chat/completions: `data:` events, `[DONE]` ends the stream
    responses_events.py  OpenAI Responses: typed events, a terminal response.completed |
                         .incomplete | .failed (no `[DONE]`; a stray one is tolerated)
    messages_events.py   Anthropic Messages: message_start ... message_stop, `ping`, `event: error`

A grammar's watch knows, for one relayed stream:
    first token  TTFT: the first non-empty text delta; the first token of any kind (tool-call
                 arguments, reasoning, a refusal) stands in when a stream has no text
    committed    whether the client may be answered now. Chat commits with the first bytes, as
                 it always has; Responses and Messages hold their opening events back
                 (response.created/in_progress, message_start/ping) until the first token, a
                 terminal event or an error, so that a failure before it still fails over. An
                 error event before the first token that says the upstream failed (5xx, 429,
                 529 overloaded) fails the attempt (`failure_status`), as a 5xx status would
    usage        prompt and output tokens, where the grammar keeps them
    done         the stream ended the way the grammar says a complete one ends
    error event  how a mid-stream failure is written in the grammar
`feed` returns what to send the client: whole events only (a partial event waits for its end,
so the gateway's own error event never follows half an event), with `model` restamped to the
public name where the grammar carries it. `Grammar` pairs a watch with how the API's whole
(non-streamed) bodies report usage.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import orjson


class Facts(NamedTuple):
    """What a whole answer says about itself (None where it does not say)."""

    prompt_tokens: int | None = None
    output_tokens: int | None = None
    response_id: str | None = None  # a stored response's id (Responses only)
    cached_tokens: int | None = None  # of the prompt, read from the upstream's prompt cache


class Described(NamedTuple):
    """What an answer says it is (OpenTelemetry's gen_ai.response.*): its id, the model that
    wrote it (the upstream's name), and why it stopped (each choice's reason)."""

    upstream_id: str | None = None
    model: str | None = None
    finish_reasons: tuple[str, ...] = ()


UNDESCRIBED = Described()


class StreamGrammar(Protocol):
    first_token_s: float | None
    last_token_s: float | None
    done: bool
    upstream_error: bool
    response_id: str | None
    described: Described

    @property
    def committed(self) -> bool: ...

    @property
    def failure_status(self) -> int:
        """The status an error event seen before the first token stands for (0: none)."""
        ...

    @property
    def ttft_s(self) -> float | None: ...

    @property
    def tpot_s(self) -> float | None: ...

    @property
    def prompt_tokens(self) -> int | None: ...

    @property
    def cached_tokens(self) -> int | None: ...

    @property
    def output_tokens(self) -> int: ...

    def feed(self, chunk: bytes) -> bytes:
        """Watch a chunk as read; returns the whole events to send (restamped)."""
        ...

    def flush(self) -> bytes:
        """At the end of the body: the last event if it lacked only its blank line, else b""."""
        ...

    def error_event(self, message: str, code: str) -> bytes:
        """A mid-stream failure written in this grammar."""
        ...


@dataclass(frozen=True, slots=True)
class Grammar:
    """One API's grammar: a watch per stream, and how its whole bodies report usage."""

    name: str
    watch: Callable[[float, str | None], StreamGrammar]  # (started_s, public model or None)
    facts: Callable[[Mapping[str, Any]], Facts]


@dataclass(slots=True)
class EventWatch:
    """What every grammar's watch keeps; subclasses read their events into it.

    `public_model`: the name to restamp `model` with, or None to leave the upstream's."""

    started_s: float
    public_model: str | None = None
    first_token_s: float | None = None  # the first text token
    first_any_s: float | None = None  # the first token of any kind
    last_token_s: float | None = None
    content_events: int = 0
    reported_prompt_tokens: int | None = None
    reported_output_tokens: int | None = None
    reported_cached_tokens: int | None = None
    done: bool = False
    upstream_error: bool = False
    error_status: int = 0  # what the upstream's error event stands for, as an HTTP status
    response_id: str | None = None
    described: Described = UNDESCRIBED
    _pending: bytes = field(default=b"", repr=False)

    @property
    def committed(self) -> bool:
        return self.first_any_s is not None or self.done or self.upstream_error

    @property
    def failure_status(self) -> int:
        if self.first_any_s is not None or not self.upstream_error:
            return 0
        status = self.error_status
        return status if status == 429 or status >= 500 else 0

    @property
    def ttft_s(self) -> float | None:
        first = self.first_token_s if self.first_token_s is not None else self.first_any_s
        return None if first is None else first - self.started_s

    @property
    def prompt_tokens(self) -> int | None:
        return self.reported_prompt_tokens

    @property
    def cached_tokens(self) -> int | None:
        return self.reported_cached_tokens

    @property
    def output_tokens(self) -> int:
        reported = self.reported_output_tokens
        return reported if reported is not None else self.content_events

    @property
    def tpot_s(self) -> float | None:
        tokens = self.output_tokens
        first = self.first_token_s if self.first_token_s is not None else self.first_any_s
        if first is None or self.last_token_s is None or tokens < 2:
            return None
        return (self.last_token_s - first) / (tokens - 1)

    def feed(self, chunk: bytes) -> bytes:
        raise NotImplementedError  # each grammar reads its own events

    def flush(self) -> bytes:
        tail, self._pending = self._pending.strip(), b""
        return self.feed(tail + b"\n\n") if tail and _whole(tail) else b""

    def _describe(self, body: Mapping[str, Any], reasons: tuple[str, ...] | None = None) -> None:
        """Note the answer's id and model (the first seen) and add its finish reasons (those
        `body` gives, unless `reasons` says)."""
        seen = self.described
        found = describe(body)
        self.described = Described(
            seen.upstream_id or found.upstream_id,
            seen.model or found.model,
            seen.finish_reasons + (found.finish_reasons if reasons is None else reasons),
        )

    def _token(self, now: float, *, text: bool = True, events: int = 1) -> None:
        if self.first_any_s is None:
            self.first_any_s = now
        if text and self.first_token_s is None:
            self.first_token_s = now
        self.last_token_s = now
        self.content_events += events

    def _split(self, chunk: bytes) -> list[bytes]:
        """The whole events so far (without their blank lines); the rest waits."""
        data = self._pending + chunk if self._pending else chunk
        if b"\r" in data:  # SSE allows CRLF; events are split on LF LF
            data = data.replace(b"\r\n", b"\n")
        parts = data.split(b"\n\n")
        self._pending = parts.pop()
        return parts


MODEL_FIELD = re.compile(rb'"model":\s*"(?:[^"\\]|\\.)*"')


def parse_whole(body: bytes) -> dict[str, Any] | None:
    """A whole answer's JSON object, when it carries usage or a model to restamp. orjson is
    4-6x faster than `json` on a whole answer; an integer beyond 64 bits (a float to orjson)
    fails the checks of what reads it."""
    if b'"usage"' not in body and b'"model"' not in body:
        return None
    return parsed(body)


def restamp_whole(body: bytes, whole: Mapping[str, Any], public_model: str) -> bytes:
    """The body with its top-level `model` set to `public_model`. The first `"model":` field is
    replaced in place when it is the top-level one (every API puts it before any nested one it
    has, in practice); otherwise the body is re-encoded."""
    model = whole.get("model")
    if model is None or model == public_model:
        return body
    found = MODEL_FIELD.search(body)
    new = b'"model":' + dumps_value(public_model)
    if found is not None and parsed(b"{" + found.group() + b"}") == {"model": model}:
        return body[: found.start()] + new + body[found.end() :]
    return dumps(dict(whole) | {"model": public_model})


def describe(body: Mapping[str, Any]) -> Described:
    """A whole answer's (or a chunk's, a response or message object's) id, model and finish
    reasons: chat choices' finish_reason, a message's stop_reason, a response's status."""
    reasons: list[str] = []
    choices = body.get("choices")
    if isinstance(choices, list):
        reasons = [
            c["finish_reason"] for c in choices if isinstance(c, dict) and _text(c, "finish_reason")
        ]
    elif _text(body, "stop_reason"):
        reasons = [body["stop_reason"]]
    elif _text(body, "status") and body.get("object") == "response":
        reasons = [body["status"]]
    return Described(
        body["id"] if _text(body, "id") else None,
        body["model"] if _text(body, "model") else None,
        tuple(reasons),
    )


def _text(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name)
    return isinstance(value, str) and bool(value)


def dumps_value(value: str) -> bytes:
    return json.dumps(value).encode()


def joined(events: list[bytes]) -> bytes:
    return b"\n\n".join(events) + b"\n\n" if events else b""


def data_of(event: bytes) -> bytes | None:
    """The `data` field of one SSE event (lines joined as SSE joins them), None without one."""
    lines = [line[5:] for line in event.split(b"\n") if line.startswith(b"data:")]
    if not lines:
        return None
    return b"\n".join(line[1:] if line.startswith(b" ") else line for line in lines)


def parsed(payload: bytes | None) -> dict[str, Any] | None:
    if payload is None:
        return None
    try:
        value = orjson.loads(payload)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def with_data(event: bytes, payload: Mapping[str, Any]) -> bytes:
    """The event with its data replaced by `payload` (other fields kept, in order)."""
    lines = [line for line in event.split(b"\n") if not line.startswith(b"data:")]
    return b"\n".join([*lines, b"data: " + dumps(payload)])


def frame(name: str, payload: Mapping[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + dumps(payload) + b"\n\n"


def dumps(payload: Mapping[str, Any]) -> bytes:
    try:
        return orjson.dumps(payload)
    except TypeError:  # integers beyond 64 bits
        return json.dumps(payload, separators=(",", ":")).encode()


def number(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def cached_tokens(usage: Mapping[str, Any]) -> int | None:
    """Prompt tokens read from a prompt cache, as each API reports them: chat and completions
    `prompt_tokens_details.cached_tokens` (vLLM with --enable-prompt-tokens-details, OpenAI),
    Responses `input_tokens_details.cached_tokens`, Messages `cache_read_input_tokens`."""
    for key in ("prompt_tokens_details", "input_tokens_details"):
        details = usage.get(key)
        if isinstance(details, dict):
            return number(details.get("cached_tokens"))
    return number(usage.get("cache_read_input_tokens"))


def _whole(event: bytes) -> bool:
    payload = data_of(event)
    return payload is not None and (payload.strip() == b"[DONE]" or parsed(payload) is not None)

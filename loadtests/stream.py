"""One streamed request (chat, or with `api` a Responses or Messages one): its request body,
and its timing as a client sees it.

    t0  request sent        t1  first delta with non-empty content     tN  last such delta
    TTFT = t1 - t0          TPOT = (tN - t1) / (n - 1)                  E2E = end of stream - t0
    n = usage.completion_tokens (the gateway passes usage through), else content deltas counted

Role-only deltas, usage-only chunks and comments do not count as tokens. Responses and Messages
events are read as chat chunks (`gateway/bench/api_events.py`): their text deltas, their usage,
their end event (no `[DONE]`). Lines are read as
they arrive (`iter_content(chunk_size=None)` on a requests response: no client-side buffering;
docs/loadtesting.md says why Locust's own timing cannot be used).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import requests

from gateway.bench.api_events import Api, as_chat
from gateway.bench.api_events import request_body as api_body
from loadtests.plan import PlannedCall

Clock = Callable[[], float]
_DONE = b"[DONE]"
CHARS_PER_TOKEN = 4
CHAT_OVERHEAD_TOKENS = 4  # the simulated engine counts 4 tokens per chat message
_FILLER = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "


def filler_prompt(tokens: int, index: int) -> str:
    """About `tokens` prompt tokens as the simulated engine counts them (chars / 4 + 4)."""
    chars = max(1, tokens - CHAT_OVERHEAD_TOKENS) * CHARS_PER_TOKEN
    text = f"{index} " + _FILLER * (chars // len(_FILLER) + 1)
    return text[:chars]


def call_body(model: str, call: PlannedCall, api: Api = "chat") -> dict[str, Any]:
    if api != "chat":
        return api_body(
            api, model, filler_prompt(call.prompt_tokens, call.index), call.output_tokens
        )
    messages = call.messages or [
        {"role": "user", "content": filler_prompt(call.prompt_tokens, call.index)}
    ]
    return {
        "model": model,
        "messages": messages,
        "max_tokens": call.output_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


@dataclass(frozen=True, slots=True)
class StreamResult:
    first_s: float | None = None
    last_s: float | None = None
    content_events: int = 0
    usage_tokens: int | None = None
    prompt_tokens: int | None = None
    done: bool = False
    error: str | None = None
    cached_tokens: int = 0  # usage.prompt_tokens_details.cached_tokens

    @property
    def output_tokens(self) -> int:
        return self.usage_tokens if self.usage_tokens is not None else self.content_events


def read_stream(
    lines: Iterable[bytes], clock: Clock = time.perf_counter, api: Api = "chat"
) -> StreamResult:
    """Consume SSE lines until the end event (or an error event, or the end of the stream)."""
    first_s = last_s = None
    events, done = 0, False
    usage: dict[str, Any] = {}
    for line in lines:
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        event, ends = as_chat(api, json.loads(data)) if data != _DONE else ({}, True)
        if event.get("error"):
            return StreamResult(first_s, last_s, events, error=_error_code(event["error"]))
        usage |= {k: v for k, v in (event.get("usage") or {}).items() if v is not None}
        if _has_content(event):
            last_s = clock()
            first_s = first_s if first_s is not None else last_s
            events += 1
        if ends:
            done = True
            break
    return StreamResult(
        first_s,
        last_s,
        events,
        _int(usage, "completion_tokens"),
        _int(usage, "prompt_tokens"),
        done=done,
        error=None if done else "stream ended without [DONE]",
        cached_tokens=_cached(usage) if done else 0,
    )


def lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Lines as soon as each is complete (`iter_lines`, without its typing for chunk_size)."""
    pending = b""
    for chunk in chunks:
        *complete, pending = (pending + chunk).split(b"\n")
        yield from complete
    if pending:
        yield pending


def _has_content(event: dict[str, Any]) -> bool:
    for choice in event.get("choices") or ():
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if isinstance(delta, dict) and delta.get("content"):
            return True
    return False


def _int(usage: dict[str, Any], key: str) -> int | None:
    value = usage.get(key)
    return value if isinstance(value, int) else None


def _error_code(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("code") or error.get("type") or "stream error")
    return "stream error"


@dataclass(frozen=True, slots=True)
class Measured:
    status: int
    reason: str  # x-slo-gateway-reason, else the error code or what broke
    gateway_reason: bool  # the reason came from the gateway's header (a deliberate refusal)
    endpoint: str
    attempts: int
    e2e_s: float
    completed: bool = False
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft_s: float | None = None
    tpot_s: float | None = None
    cached_tokens: int = 0
    decision: str = ""  # x-slo-gateway-decision
    predicted_p95s: tuple[float | None, float | None] = (None, None)  # TTFT, TPOT (headers)


def _cached(usage: dict[str, Any]) -> int:
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return cached if isinstance(cached, int) else 0


def measure_call(
    response: requests.Response, t0: float, clock: Clock = time.perf_counter, api: Api = "chat"
) -> Measured:
    """Read a streamed response to its end; times are from t0 (on `clock`)."""
    header = response.headers.get("x-slo-gateway-reason") or ""
    endpoint = response.headers.get("x-slo-gateway-endpoint") or ""
    attempts = int(response.headers.get("x-slo-gateway-attempts") or 0)
    decision = response.headers.get("x-slo-gateway-decision") or ""
    if response.status_code != 200:
        reason = header or _body_code(response)
        e2e_s = clock() - t0
        return Measured(
            response.status_code, reason, bool(header), endpoint, attempts, e2e_s, decision=decision
        )
    result = read_stream(lines(response.iter_content(chunk_size=None)), clock, api)
    e2e_s = clock() - t0
    completed = result.done and result.first_s is not None
    ttft_s, tpot_s = _ttft_tpot(result, t0)
    return Measured(
        200,
        result.error or ("" if completed else "empty response"),
        False,
        endpoint,
        attempts,
        e2e_s,
        completed,
        result.prompt_tokens or 0,
        result.output_tokens,
        ttft_s,
        tpot_s,
        result.cached_tokens,
        decision,
        (_seconds(response, "ttft"), _seconds(response, "tpot")),
    )


def _seconds(response: requests.Response, quantity: str) -> float | None:
    """The gateway's predicted p95 of `quantity` for the endpoint it ranked first, if it made
    one (`x-slo-gateway-predicted-<quantity>-p95-ms`): the live report's coverage."""
    value = response.headers.get(f"x-slo-gateway-predicted-{quantity}-p95-ms")
    try:
        return float(value) / 1e3 if value is not None else None
    except ValueError:
        return None


def _ttft_tpot(result: StreamResult, t0: float) -> tuple[float | None, float | None]:
    first_s, last_s, tokens = result.first_s, result.last_s, result.output_tokens
    if first_s is None:
        return None, None
    tpot_s = (last_s - first_s) / (tokens - 1) if last_s is not None and tokens > 1 else None
    return first_s - t0, tpot_s


def _body_code(response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}"
    error = body.get("error") if isinstance(body, dict) else None  # OpenAI's and Anthropic's
    return _error_code(error) if error else f"HTTP {response.status_code}"

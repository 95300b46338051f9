"""One streamed completion, timed the way serving benchmarks define their numbers.

    t0 request sent   t1 first non-empty content delta   tN last content delta   tE stream end
    TTFT = t1 - t0                      role-only and usage-only events do not count
    TPOT = (tN - t1) / (n - 1)          n = usage.completion_tokens, else content deltas counted
    ITL  = gaps between consecutive content deltas (per chunk, as vLLM's ITL)
    E2E  = tE - t0                      includes a late `[DONE]`, as a client sees it

TTFT at the first *content* delta matters behind gateways: a role-only delta flushed before the
upstream's first token would otherwise read as a fast TTFT. Token counts come from `usage`
(requested with `stream_options.include_usage`); without it each content delta counts as one
token and the measurement says so (`tokens_counted`). Responses and Messages streams are read
through `api_events.as_chat` (their text deltas, their usage, their end event).
"""

from __future__ import annotations

import functools
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_aiohttp import HttpxAiohttpClient

from gateway.bench import api_events
from gateway.bench.api_events import Api

Clock = Callable[[], float]

CHARS_PER_TOKEN = 4
# Three-letter words plus a space are 4 characters and about one token in common tokenizers,
# so a prompt of N words is close to N tokens whichever tokenizer the server uses.
_WORDS = (
    *("the", "and", "for", "are", "but", "not", "you", "all", "any", "can", "had", "her", "was"),
    *("one", "our", "out", "day", "get", "has", "him", "his", "how", "man", "new", "now", "old"),
    *("see", "two", "way", "who", "boy", "did", "its", "let", "put", "say", "she", "too", "use"),
    *("art", "cup", "dog", "eye", "fun", "hat", "ice", "job", "key", "leg", "map", "net", "pen"),
)
_DONE = object()


@dataclass(frozen=True, slots=True)
class Target:
    """Where and how to send: `url` is the full chat or completions URL."""

    url: str
    model: str
    api: Api = "chat"
    headers: dict[str, str] = field(default_factory=dict)
    ignore_eos: bool = False


def endpoint_url(base_url: str, api: Api) -> str:
    """`base_url` as the OpenAI SDK takes it (".../v1"); a bare host gets "/v1" added."""
    url = httpx.URL(base_url)
    path = url.path.rstrip("/") or "/v1"
    return str(url.copy_with(path=path + api_events.PATHS[api]))


def make_prompt(tokens: int, nonce: int = 0) -> str:
    """About `tokens` tokens of filler text (4 characters per token), starting with `nonce`.

    A different nonce per request keeps an engine's prefix cache from serving the prompt: the
    cache matches whole blocks from the start, so a differing first token defeats it.
    """
    return f"{nonce:03d} {_filler(max(0, tokens - 1))}"


@functools.lru_cache(maxsize=16)
def _filler(tokens: int) -> str:
    rng = random.Random(tokens)
    return " ".join(rng.choice(_WORDS) for _ in range(tokens))


def target_body(target: Target, prompt: str, max_tokens: int) -> dict[str, Any]:
    body = api_events.request_body(target.api, target.model, prompt, max_tokens)
    if target.ignore_eos:
        body["ignore_eos"] = True  # vLLM extension: generate exactly max_tokens
    return body


def make_client(*, timeout_s: float, max_connections: int) -> httpx.AsyncClient:
    """httpx's API over aiohttp: the default transport was 8-10x slower at 64 streams."""
    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )
    return HttpxAiohttpClient(timeout=httpx.Timeout(timeout_s, connect=10.0), limits=limits)


@dataclass(frozen=True, slots=True)
class Measurement:
    error: str | None
    status: int | None
    e2e_s: float
    ttft_s: float | None = None
    tpot_s: float | None = None
    itl_s: tuple[float, ...] = ()
    output_tokens: int = 0
    tokens_counted: bool = False  # True when usage was missing and content deltas were counted
    prompt_tokens_reported: int | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def output_tokens_per_s(self) -> float | None:
        """Output tokens over the whole request (E2E), as one user experiences it."""
        return self.output_tokens / self.e2e_s if self.ok and self.e2e_s > 0 else None


def parse_sse_line(line: str) -> dict[str, Any] | object | None:
    """The JSON payload of a `data:` line, `_DONE` for `[DONE]`, None for anything else."""
    if not line.startswith("data:"):
        return None  # blank separators, ": ping" comments, "event:" lines
    data = line[5:].strip()
    if data == "[DONE]":
        return _DONE
    payload = json.loads(data)
    return payload if isinstance(payload, dict) else None


def _content(event: dict[str, Any]) -> str:
    choices = event.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ""
    delta = choices[0].get("delta") or {}
    return str(delta.get("content") or choices[0].get("text") or "")


class StreamTimer:
    """Turns timestamped stream events into a `Measurement`; pure, so tests can drive time."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.first_s: float | None = None
        self.last_s = t0
        self.itl_s: list[float] = []
        self.chunks = 0
        self.usage: dict[str, Any] = {}
        self.error: str | None = None

    def feed(self, now: float, event: dict[str, Any]) -> None:
        if event.get("error") or event.get("object") == "error":
            error = event.get("error") or event
            message = error.get("message", error) if isinstance(error, dict) else error
            self.error = f"stream error: {message}"
            return
        if isinstance(event.get("usage"), dict):  # merged: Messages reports it in two events
            self.usage = self.usage | {k: v for k, v in event["usage"].items() if v is not None}
        if not _content(event):
            return
        if self.first_s is None:
            self.first_s = now
        else:
            self.itl_s.append(now - self.last_s)
        self.last_s = now
        self.chunks += 1

    def failed(self, now: float, error: str, status: int | None = None) -> Measurement:
        return Measurement(error=error, status=status, e2e_s=now - self.t0)

    def finish(self, now: float, status: int = 200) -> Measurement:
        if self.error is not None or self.first_s is None:
            return self.failed(now, self.error or "empty response", status)
        reported = self.usage.get("completion_tokens")
        counted = not (isinstance(reported, int) and reported > 0)
        tokens = reported if isinstance(reported, int) and not counted else self.chunks
        tpot_s = (self.last_s - self.first_s) / (tokens - 1) if tokens > 1 else None
        return Measurement(
            error=None,
            status=status,
            e2e_s=now - self.t0,
            ttft_s=self.first_s - self.t0,
            tpot_s=tpot_s,
            itl_s=tuple(self.itl_s),
            output_tokens=tokens,
            tokens_counted=counted,
            prompt_tokens_reported=self.usage.get("prompt_tokens"),
        )


async def measure_request(
    client: httpx.AsyncClient,
    target: Target,
    prompt: str,
    max_tokens: int,
    clock: Clock = time.perf_counter,
) -> Measurement:
    """Send one streaming request and time it; failures come back as a Measurement, not raised."""
    body = target_body(target, prompt, max_tokens)
    timer = StreamTimer(clock())
    status: int | None = None
    try:
        async with client.stream("POST", target.url, json=body, headers=target.headers) as resp:
            status = resp.status_code
            if status != 200:
                text = (await resp.aread()).decode(errors="replace")[:200]
                return timer.failed(clock(), f"HTTP {status}: {text}", status)
            await _consume(resp, timer, clock, target.api)
    except (httpx.HTTPError, OSError, TimeoutError) as exc:  # OSError: resets aiohttp leaves raw
        where = "stream broken: " if status == 200 else ""
        return timer.failed(clock(), f"{where}{type(exc).__name__}: {exc}", status)
    except json.JSONDecodeError:
        return timer.failed(clock(), "stream broken: malformed event", status)
    return timer.finish(clock())


async def _consume(resp: httpx.Response, timer: StreamTimer, clock: Clock, api: Api) -> None:
    async for line in resp.aiter_lines():
        event = parse_sse_line(line)
        if event is _DONE:
            return
        if isinstance(event, dict):
            chunk, ends = api_events.as_chat(api, event)
            timer.feed(clock(), chunk)
            if timer.error is not None or ends:
                return

"""Relaying an upstream's stream to the client, event by event, to its end or to a clean error.

The API's stream grammar (gateway/upstream/grammar.py) reads every chunk on the way: `commit`
reads an attempt's opening events until the grammar may answer the client (chat: its first
bytes; Responses and Messages: their first token), so that a stream failing before that still
counts as a failed attempt and fails over; `relay` then sends what was held and relays the rest.
What the client gets is the upstream's whole events as received (the grammar restamps `model`;
secrets are redacted from events that mention an error, gateway/upstream/redaction.py),
and, when the upstream fails or stops early, an error event in the API's own grammar. A partial
event is never sent ahead of that error event. The relay stops when the client leaves (noticed
by gateway/upstream/departure.py, which cancels it). Its outcome is `ok`, `upstream_error` (a
mid-stream failure, or a stream that stopped before its grammar's end) or `cancelled` (the
client went away); the caller then releases the upstream response, which cancels the request
upstream when it is not complete. Plain ASGI sends: Starlette's StreamingResponse, with its
task group, cancel scopes and async generator per chunk, cost more than the relay itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Callable

import aiohttp
from starlette.types import Receive, Send

from gateway.core.failover import FIRST_BYTE_TIMEOUT
from gateway.errors import AttemptFailed
from gateway.upstream.client import Opened
from gateway.upstream.departure import Departure
from gateway.upstream.grammar import StreamGrammar
from gateway.upstream.redaction import Redactor

# What a failing upstream connection raises: aiohttp's errors, its timeouts, bare socket errors.
UPSTREAM_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)
INTERRUPTED, TRUNCATED = "upstream_stream_interrupted", "upstream_stream_truncated"


async def commit(opened: Opened, watch: StreamGrammar, timeout_s: float) -> Opened:
    """Read until `watch` commits, within what is left of the first-byte timeout; returns the
    response with everything to send first, carrying its watch. Raises AttemptFailed (the
    response released) when the stream fails, ends or reports the upstream's failure before
    that."""
    held = [watch.feed(opened.first)]
    if not watch.committed:
        left_s = timeout_s - (time.perf_counter() - opened.started_s)
        try:
            async with asyncio.timeout(max(0.0, left_s)):
                held += await _read_until_committed(opened, watch)
        except TimeoutError:
            opened.release()
            raise AttemptFailed(opened.endpoint.id, FIRST_BYTE_TIMEOUT) from None
        except UPSTREAM_ERRORS as exc:
            opened.release()
            raise AttemptFailed(opened.endpoint.id, type(exc).__name__) from None
        except BaseException:  # the client left, or shutdown: the upstream learns of it
            opened.release()
            raise
    failed = _failure(opened, watch)
    if failed is not None:
        opened.release()
        raise failed
    first = held[0] if len(held) == 1 else b"".join(held)  # most often the first chunk as read
    return dataclasses.replace(opened, first=first, watch=watch)


async def _read_until_committed(opened: Opened, watch: StreamGrammar) -> list[bytes]:
    held = []
    while not watch.committed:
        chunk = await opened.rest.readany()
        if not chunk:
            held.append(watch.flush())
            break
        held.append(watch.feed(chunk))
    return held


def _failure(opened: Opened, watch: StreamGrammar) -> AttemptFailed | None:
    endpoint_id = opened.endpoint.id
    if not watch.committed:
        return AttemptFailed(endpoint_id, "empty_stream")
    status = watch.failure_status
    if status:
        return AttemptFailed(endpoint_id, f"error_event_{status}", status=status)
    return None


# Told of the watch when its last token reaches the time returned last (the first time, at its
# first token) and once at the end; returns when to be told next, on the watch's clock.
Seen = Callable[[StreamGrammar], float]


def _unseen(watch: StreamGrammar) -> float:
    return math.inf


async def relay(
    opened: Opened,
    watch: StreamGrammar,
    headers: list[tuple[bytes, bytes]],
    redact: Redactor,
    receive: Receive,
    send: Send,
    seen: Seen = _unseen,
) -> str:
    """Send the response start and relay the stream; returns the outcome. `seen` is told of
    the watch as its tokens come (the running stream's observations, gateway/core/progress.py):
    when they reach the time it asked for, and at the end."""
    outcome = "cancelled"
    departure = Departure(lambda: client_disconnected(receive))
    try:
        with departure:
            await send({"type": "http.response.start", "status": opened.status, "headers": headers})
            outcome = await _relay(opened, watch, redact, send, seen)
    except asyncio.CancelledError:
        if not departure.left:
            raise
        departure.forgive()  # the client left: nothing more to send it
    return outcome


async def _relay(
    opened: Opened, watch: StreamGrammar, redact: Redactor, send: Send, seen: Seen
) -> str:
    """`opened.first` went through the watch in `commit`; the rest goes through it here. The
    watch hands back whole events only, so an event that mentions an error is redacted whole
    (a key split across reads is still found) and costs a substring test otherwise."""
    events, read = opened.first, opened.rest.readany
    due_s = 0.0  # `seen` asks to be told no sooner (a test per read, not a call)
    while True:
        last_s = watch.last_token_s
        if last_s is not None and last_s >= due_s:
            due_s = seen(watch)
        events = redact.events(events)
        if events:
            await send({"type": "http.response.body", "body": events, "more_body": True})
        try:
            chunk = await read()
        except UPSTREAM_ERRORS:
            seen(watch)
            tail = watch.error_event(
                "The upstream failed mid-stream.", "upstream_stream_interrupted"
            )
            return await _end(send, "upstream_error", tail)
        if not chunk:
            tail = redact.events(watch.flush())
            seen(watch)
            if watch.done or watch.upstream_error:
                return await _end(send, "ok", tail)
            tail += watch.error_event("The upstream ended the stream early.", TRUNCATED)
            return await _end(send, "upstream_error", tail)
        events = watch.feed(chunk)


async def _end(send: Send, outcome: str, tail: bytes) -> str:
    await send({"type": "http.response.body", "body": tail, "more_body": False})
    return outcome


async def client_disconnected(receive: Receive) -> None:
    """Return when the client disconnects (the body has been read, so nothing else arrives)."""
    while (await receive())["type"] != "http.disconnect":
        pass

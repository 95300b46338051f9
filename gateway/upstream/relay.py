"""Relaying an upstream's stream to the client, event by event, to its end or to a clean error.

The bytes go to the client as received, in whole events (a partial one waits for its end:
`whole_events` in gateway/upstream/sse.py), with configured secrets redacted from events that
mention an error (gateway/upstream/redaction.py); the stream watch reads them on the way for the
first token, usage and completion, and its routine fast path tells the relay which chunks need
neither (`screened`). The stream ends with an SSE error event when the upstream
fails or stops early (a partial event it left is dropped first, so that every SSE parser sees
the error), and the relay stops when the client leaves
(noticed by gateway/upstream/departure.py, which cancels it). The outcome it returns is `ok`,
`upstream_error` (a mid-stream failure, or a stream that stopped without [DONE]) or `cancelled`
(the client went away); the caller then releases the upstream response, which cancels the
request upstream when it is not complete. Plain ASGI sends: Starlette's StreamingResponse, with
its task group, cancel scopes and async generator per chunk, cost more than the relay itself.
"""

from __future__ import annotations

import asyncio

import aiohttp
from starlette.types import Receive, Send

from gateway.upstream.client import Opened
from gateway.upstream.departure import Departure
from gateway.upstream.redaction import Redactor
from gateway.upstream.sse import StreamWatch, error_event, whole_events

# What a failing upstream connection raises: aiohttp's errors, its timeouts, bare socket errors.
UPSTREAM_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)


async def relay(
    opened: Opened,
    watch: StreamWatch,
    headers: list[tuple[bytes, bytes]],
    redact: Redactor,
    receive: Receive,
    send: Send,
) -> str:
    """Send the response start and relay the stream; returns the outcome."""
    outcome = "cancelled"
    departure = Departure(lambda: client_disconnected(receive))
    try:
        with departure:
            await send({"type": "http.response.start", "status": opened.status, "headers": headers})
            outcome = await _relay(opened, watch, redact, send)
    except asyncio.CancelledError:
        if not departure.left:
            raise
        departure.forgive()  # the client left: nothing more to send it
    return outcome


async def _relay(opened: Opened, watch: StreamWatch, redact: Redactor, send: Send) -> str:
    """Whole events only, redacted where they mention an error; what is left of a partial one
    at the end is dropped. A chunk the watch found routine is whole events that mention no
    error: it goes out as it came, with no further scan (most chunks of a stream)."""
    chunk, read, partial = opened.first, opened.rest.readany, b""
    while True:
        if not watch.feed(chunk) or partial:
            chunk, partial = screened(partial + chunk, redact)
        if chunk:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        try:
            chunk = await read()
        except UPSTREAM_ERRORS:
            tail = error_event("The upstream failed mid-stream.", "upstream_stream_interrupted")
            return await _end(send, "upstream_error", tail)
        if not chunk:
            if watch.done or watch.upstream_error:
                return await _end(send, "ok", b"")
            tail = error_event("The upstream ended the stream early.", "upstream_stream_truncated")
            return await _end(send, "upstream_error", tail)


def screened(data: bytes, redact: Redactor) -> tuple[bytes, bytes]:
    """(the whole events of `data`, redacted, to send now; the partial one after them)."""
    whole, partial = whole_events(data)
    return redact.events(whole), partial


async def _end(send: Send, outcome: str, tail: bytes) -> str:
    await send({"type": "http.response.body", "body": tail, "more_body": False})
    return outcome


async def client_disconnected(receive: Receive) -> None:
    """Return when the client disconnects (the body has been read, so nothing else arrives)."""
    while (await receive())["type"] != "http.disconnect":
        pass

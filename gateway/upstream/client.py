"""Forwarding: one pooled upstream client, failover before the first byte, stream relay.

Nothing reaches the client until an upstream has produced its first body bytes, so every
failure before that point (refused connection, timeout, 429, 5xx, a stream that opens and dies)
can still fail over along the ranking. After the first byte, a failure ends the stream with an
SSE error event. Client-fault statuses (400, 413, 422) are relayed as the upstream sent them.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx
import orjson
from httpx_aiohttp import AiohttpTransport
from starlette.responses import Response
from starlette.types import Receive, Scope, Send
from yarl import URL

from gateway.config.settings import EndpointConfig, ServerConfig
from gateway.core.failover import FIRST_BYTE_TIMEOUT, answered_with_error
from gateway.errors import AttemptFailed, InvalidRequest
from gateway.telemetry import tracing
from gateway.upstream.departure import Departure
from gateway.upstream.sse import StreamWatch, error_event

CLIENT_FAULT_STATUSES = frozenset({400, 413, 422})
POOL_SIZE = 1000
# What a failing upstream connection raises: aiohttp's errors, its timeouts, bare socket errors.
UPSTREAM_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)


class MappedAiohttpTransport(AiohttpTransport):
    """httpx-aiohttp maps only some aiohttp errors to httpx's. A malformed response (a header
    over aiohttp's 8 KiB line limit, a bad status line) raises aiohttp.ClientResponseError,
    which every caller of the client (health probes, scrapes) would miss: map the rest at this
    boundary."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await super().handle_async_request(request)
        except aiohttp.ClientError as exc:
            raise httpx.RemoteProtocolError(str(exc), request=request) from exc


@dataclass(slots=True)
class UpstreamCall:
    request_id: str
    path: str  # below the endpoint's base URL, e.g. "/chat/completions"
    body: dict[str, Any]
    model: str  # the public model name
    stream: bool


class UpstreamResponse:
    """An aiohttp response seen through the little the rest of the gateway reads of it."""

    __slots__ = ("raw",)

    def __init__(self, raw: aiohttp.ClientResponse) -> None:
        self.raw = raw

    @property
    def status_code(self) -> int:
        return self.raw.status

    @property
    def headers(self) -> Mapping[str, str]:
        return self.raw.headers  # case-insensitive, like httpx's

    async def aclose(self) -> None:
        """Back to the pool when the body was read to the end; else the connection is closed,
        which is how the upstream learns that the request was abandoned."""
        self.raw.release()


@dataclass(slots=True)
class Opened:
    """An upstream response whose first bytes are in hand (the whole body when not streamed)."""

    endpoint: EndpointConfig
    response: UpstreamResponse
    first: bytes
    rest: aiohttp.StreamReader  # the same stream the first bytes came from
    started_s: float

    @property
    def status(self) -> int:
        return self.response.raw.status

    def headers(self) -> dict[str, str]:
        kind = self.response.raw.headers.get("content-type")
        return {"content-type": kind} if kind else {}


class Upstream:
    """Upstream clients. The request path uses aiohttp directly: measured, httpx's API over the
    httpx-aiohttp transport still cost 0.54x aiohttp's requests per core (request building,
    Headers, URL parsing; README, Performance). Health probes and scrapes, off the request
    path, keep httpx's API (`client`) over the same kind of transport."""

    def __init__(self, server: ServerConfig) -> None:
        self.server = server
        limits = httpx.Limits(max_connections=POOL_SIZE, max_keepalive_connections=200)
        self.client = httpx.AsyncClient(
            transport=MappedAiohttpTransport(trust_env=False, limits=limits),
            timeout=httpx.Timeout(
                connect=server.connect_timeout_s,
                read=server.idle_stream_timeout_s,
                write=server.connect_timeout_s,
                pool=server.connect_timeout_s,
            ),
            follow_redirects=False,
        )
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=POOL_SIZE, limit_per_host=POOL_SIZE),
            timeout=aiohttp.ClientTimeout(
                total=None,
                connect=server.connect_timeout_s,
                sock_read=server.idle_stream_timeout_s,
            ),
            cookie_jar=aiohttp.DummyCookieJar(),  # an upstream's cookies are never kept
            auto_decompress=False,
            trust_env=False,
        )
        self._urls: dict[tuple[str, str], URL] = {}

    async def aclose(self) -> None:
        await self.client.aclose()
        await self.session.close()

    async def open(self, endpoint: EndpointConfig, call: UpstreamCall) -> Opened:
        """One attempt: returns with the first bytes in hand, or raises AttemptFailed."""
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.server.first_byte_timeout_s):
                response = await self.session.post(
                    self._url(endpoint, call.path),
                    data=self._body(endpoint, call),
                    headers=self._headers(endpoint, call),
                    allow_redirects=False,
                )
                try:
                    first = await _first_bytes(endpoint, response, call.stream)
                except BaseException:
                    response.release()
                    raise
        except aiohttp.ClientError as exc:  # its connect and read timeouts included
            raise AttemptFailed(endpoint.id, type(exc).__name__) from None
        except TimeoutError:
            raise AttemptFailed(endpoint.id, FIRST_BYTE_TIMEOUT) from None
        except OSError as exc:
            raise AttemptFailed(endpoint.id, type(exc).__name__) from None
        return Opened(endpoint, UpstreamResponse(response), first, response.content, started)

    def _url(self, endpoint: EndpointConfig, path: str) -> URL:
        """Parsed once per endpoint and path: yarl's parse costs more than a dict lookup."""
        key = (endpoint.base_url, path)
        url = self._urls.get(key)
        if url is None:
            url = self._urls[key] = URL(endpoint.base_url.rstrip("/") + path)
        return url

    @staticmethod
    def _body(endpoint: EndpointConfig, call: UpstreamCall) -> bytes:
        body = dict(call.body)
        body["model"] = endpoint.models[call.model]
        return _dumps(body)

    @staticmethod
    def _headers(endpoint: EndpointConfig, call: UpstreamCall) -> dict[str, str]:
        headers = {
            "content-type": "application/json",
            "accept-encoding": "identity",
            "x-request-id": call.request_id,
        }
        key = endpoint.api_key()
        if key:
            headers["authorization"] = f"Bearer {key}"
        tracing.inject(headers)
        return headers


async def _first_bytes(
    endpoint: EndpointConfig, response: aiohttp.ClientResponse, stream: bool
) -> bytes:
    status = response.status
    if status >= 300 and status not in CLIENT_FAULT_STATUSES:
        await _raise_for_status(endpoint, response)
    if not stream or status >= 300:
        return _redacted(endpoint, await response.read())
    first = await response.content.readany()  # empty only at the end of the body
    if first:
        return first
    raise AttemptFailed(endpoint.id, "empty_stream")


def _dumps(body: dict[str, Any]) -> bytes:
    """orjson (7-10x faster), or the standard library where orjson refuses: integers beyond 64
    bits and nesting deeper than 255 levels, both valid JSON that bodies may carry."""
    try:
        return orjson.dumps(body)
    except TypeError:
        pass
    try:
        return json.dumps(body).encode()
    except RecursionError:
        raise InvalidRequest(
            "The request body nests JSON too deeply.", code="invalid_json"
        ) from None


def _redacted(endpoint: EndpointConfig, body: bytes) -> bytes:
    """A whole body minus the endpoint's API key, should a careless upstream echo it."""
    key = endpoint.api_key()
    return body.replace(key.encode(), b"[redacted]") if key else body


async def _raise_for_status(endpoint: EndpointConfig, response: aiohttp.ClientResponse) -> None:
    body = await response.read()
    raise answered_with_error(endpoint.id, response.status, response.headers, body, time.time())


class StreamRelay(Response):
    """The ASGI response that relays an upstream's SSE bytes as received, and ends with an SSE
    error event when the upstream fails or stops early.

    `on_end` receives the outcome: ok, upstream_error (mid-stream failure or a stream that
    stopped without [DONE]) or cancelled (the client went away, noticed by gateway/upstream/departure.py,
    which cancels the relay; the caller then closes the upstream response, which cancels the
    request upstream). It replaces Starlette's StreamingResponse, whose task group, cancel
    scopes and async generator per chunk cost more than the relay itself.
    """

    def __init__(
        self,
        opened: Opened,
        watch: StreamWatch,
        on_end: Callable[[str], None],
        headers: Mapping[str, str],
    ) -> None:
        self.status_code = opened.status
        self.background = None
        self.opened = opened
        self.watch = watch
        self.on_end = on_end
        self.raw_headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        outcome = "cancelled"
        departure = Departure(lambda: client_disconnected(receive))
        try:
            with departure:
                start = {"type": "http.response.start", "status": self.opened.status}
                await send(start | {"headers": self.raw_headers})
                outcome = await self._relay(send)
        except asyncio.CancelledError:
            if not departure.left:
                raise
            departure.forgive()  # the client left: nothing more to send it
        finally:
            self.on_end(outcome)

    async def _relay(self, send: Send) -> str:
        watch, chunk, read = self.watch, self.opened.first, self.opened.rest.readany
        while True:
            watch.feed(chunk)
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            try:
                chunk = await read()
            except UPSTREAM_ERRORS:
                tail = error_event("The upstream failed mid-stream.", "upstream_stream_interrupted")
                return await _end(send, "upstream_error", tail)
            if not chunk:
                if watch.done or watch.upstream_error:
                    return await _end(send, "ok", b"")
                tail = error_event(
                    "The upstream ended the stream early.", "upstream_stream_truncated"
                )
                return await _end(send, "upstream_error", tail)


async def _end(send: Send, outcome: str, tail: bytes) -> str:
    await send({"type": "http.response.body", "body": tail, "more_body": False})
    return outcome


async def client_disconnected(receive: Receive) -> None:
    """Return when the client disconnects (the body has been read, so nothing else arrives)."""
    while (await receive())["type"] != "http.disconnect":
        pass

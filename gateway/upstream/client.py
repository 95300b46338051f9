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
from typing import Any, Protocol

import aiohttp
import httpx
import orjson
from httpx_aiohttp import AiohttpTransport
from yarl import URL

from gateway.config.settings import Api, EndpointConfig, ServerConfig
from gateway.core.engine_hints import EngineHints
from gateway.core.failover import CLIENT_FAULT_STATUSES, FIRST_BYTE_TIMEOUT, answered_with_error
from gateway.errors import AttemptFailed, InvalidRequest, ResponseNotFound, UpstreamError
from gateway.telemetry import tracing
from gateway.upstream.grammar import Grammar, StreamGrammar
from gateway.upstream.sse import CHAT

POOL_SIZE = 1000


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
    """What to send upstream for one request, and how to read and relay the answer."""

    request_id: str  # the client's x-request-id (or the gateway's): a label, forwarded
    path: str  # below the endpoint's base URL, e.g. "/chat/completions"
    body: dict[str, Any]
    model: str  # the public model name
    stream: bool
    grammar: Grammar = CHAT  # the API's stream grammar (gateway/upstream/grammar.py)
    api: Api = "chat"  # only endpoints serving it are candidates
    headers: tuple[tuple[str, str], ...] = ()  # forwarded upstream (anthropic-version, -beta)
    reply_headers: tuple[tuple[str, str], ...] = ()  # added to the client's answer
    owner: str | None = None  # the one endpoint that may serve it (a stored response's owner)
    store: bool = False  # remember which endpoint stored the response it creates
    hints: EngineHints | None = None  # the class's engine priority and service tier
    counting: bool = False  # counts the prompt's tokens, generates none: no context window


class Chunks(Protocol):
    """The rest of a response body, chunk by chunk as it arrives; b"" at its end."""

    async def readany(self) -> bytes: ...


@dataclass(slots=True)
class Opened:
    """An upstream response whose first bytes are in hand (the whole body when not streamed),
    as received: the router redacts secrets before anything reaches the client.

    `release` gives the connection back to the pool when the body was read to the end, else
    closes it, which is how the upstream learns that the request was abandoned; it never
    suspends."""

    endpoint: EndpointConfig
    status: int
    headers: Mapping[str, str]  # the upstream's, case-insensitive
    first: bytes
    rest: Chunks
    release: Callable[[], None]
    started_s: float
    watch: StreamGrammar | None = None  # a stream's grammar watch, once committed

    def relayed_headers(self) -> dict[str, str]:
        """The upstream headers the client gets: only the content type."""
        kind = self.headers.get("content-type")
        return {"content-type": kind} if kind else {}


class Upstream(Protocol):
    """Opens one attempt at an endpoint. `AiohttpUpstream` on the wire; tests of the router and
    failover logic pass an in-process one (tests/fixtures/upstream_fakes.py)."""

    async def open(self, endpoint: EndpointConfig, call: UpstreamCall) -> Opened:
        """Returns with the first bytes in hand, or raises AttemptFailed."""
        ...


class AiohttpUpstream:
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
                    first = await _first_bytes(endpoint, response, call)
                except BaseException:
                    response.release()
                    raise
        except aiohttp.ClientError as exc:  # its connect and read timeouts included
            raise AttemptFailed(endpoint.id, type(exc).__name__) from None
        except TimeoutError:
            raise AttemptFailed(endpoint.id, FIRST_BYTE_TIMEOUT) from None
        except OSError as exc:
            raise AttemptFailed(endpoint.id, type(exc).__name__) from None
        return Opened(
            endpoint,
            response.status,
            response.headers,
            first,
            response.content,
            response.release,
            started,
        )

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
        if call.hints is not None:
            call.hints.apply(body, endpoint)
        return _dumps(body)

    @staticmethod
    def _headers(endpoint: EndpointConfig, call: UpstreamCall) -> dict[str, str]:
        headers = {
            "content-type": "application/json",
            "accept-encoding": "identity",
            "x-request-id": call.request_id,
        }
        headers.update(call.headers)
        headers.update(endpoint.auth_headers())
        tracing.inject(headers)
        return headers

    async def request(
        self, endpoint: EndpointConfig, method: str, path: str, request_id: str
    ) -> tuple[int, str, bytes]:
        """One plain call below the endpoint's base URL (a stored response's GET, DELETE,
        cancel): (status, content type, body); a failure to answer is an UpstreamError."""
        headers = {"accept-encoding": "identity", "x-request-id": request_id}
        headers.update(endpoint.auth_headers())
        try:
            async with (
                asyncio.timeout(self.server.first_byte_timeout_s),
                self.session.request(
                    method, self._url(endpoint, path), headers=headers, allow_redirects=False
                ) as response,
            ):
                body = _redacted(endpoint, await response.read())
                return response.status, response.headers.get("content-type", ""), body
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise UpstreamError(
                f"The endpoint that stored this response did not answer ({type(exc).__name__}).",
                code="upstream_failed",
            ) from None


async def _first_bytes(
    endpoint: EndpointConfig, response: aiohttp.ClientResponse, call: UpstreamCall
) -> bytes:
    status = response.status
    if status == 404 and call.owner is not None:
        await response.read()
        raise owner_lost(endpoint.id)
    if status >= 300 and status not in CLIENT_FAULT_STATUSES:
        await _raise_for_status(endpoint, response)
    if not call.stream or status >= 300:
        return await response.read()  # the router redacts it (gateway/upstream/redaction.py)
    first = await response.content.readany()  # empty only at the end of the body
    if first:
        return first
    raise AttemptFailed(endpoint.id, "empty_stream")


def owner_lost(endpoint_id: str, param: str | None = "previous_response_id") -> ResponseNotFound:
    """A stored response's owner answered 404: it no longer has it (or lacks the route)."""
    return ResponseNotFound(
        f"The response was stored on endpoint {endpoint_id!r}, which no longer has it (it "
        "restarted or expired it, or does not serve this route). Stored responses are never "
        "moved to another endpoint: start a new conversation without previous_response_id.",
        code="response_owner_lost",
        param=param,
    )


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


async def _raise_for_status(endpoint: EndpointConfig, response: aiohttp.ClientResponse) -> None:
    body = await response.read()
    raise answered_with_error(endpoint.id, response.status, response.headers, body, time.time())


def _redacted(endpoint: EndpointConfig, body: bytes) -> bytes:
    """A passed-through body minus the endpoint's API key, should a careless upstream echo it
    (these answers bypass the router's redactor)."""
    key = endpoint.api_key()
    return body.replace(key.encode(), b"[redacted]") if key else body

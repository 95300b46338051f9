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
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from gateway import tracing
from gateway.settings import EndpointConfig, ServerConfig
from gateway.signals import classify_error
from gateway.sse import StreamWatch, error_event

CLIENT_FAULT_STATUSES = frozenset({400, 413, 422})
RELAYED_HEADERS = ("content-type",)


class MappedAiohttpTransport(AiohttpTransport):
    """httpx-aiohttp maps only some aiohttp errors to httpx's. A malformed response (a header
    over aiohttp's 8 KiB line limit, a bad status line) raises aiohttp.ClientResponseError,
    which every caller of the client (forwarding, health probes, scrapes) would miss: map the
    rest at this boundary."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await super().handle_async_request(request)
        except aiohttp.ClientError as exc:
            raise httpx.RemoteProtocolError(str(exc), request=request) from exc


@dataclass(frozen=True, slots=True)
class UpstreamCall:
    request_id: str
    path: str  # below the endpoint's base URL, e.g. "/chat/completions"
    body: dict[str, Any]
    model: str  # the public model name
    stream: bool


class AttemptFailed(Exception):
    """One endpoint failed before the first byte; the next one in the ranking may be tried."""

    def __init__(
        self, endpoint_id: str, reason: str, *, status: int = 0, retry_after_s: float | None = None
    ) -> None:
        super().__init__(f"{endpoint_id}: {reason}")
        self.endpoint_id = endpoint_id
        self.reason = reason
        self.status = status
        self.retry_after_s = retry_after_s
        self.quota_exhausted = False


@dataclass(slots=True)
class Opened:
    """An upstream response whose first bytes are in hand (the whole body when not streaming)."""

    endpoint: EndpointConfig
    response: httpx.Response
    first: bytes
    rest: AsyncIterator[bytes]  # the same iterator the first bytes came from
    started_s: float

    @property
    def status(self) -> int:
        return self.response.status_code

    def headers(self) -> dict[str, str]:
        return {k: v for k in RELAYED_HEADERS if (v := self.response.headers.get(k))}


class Upstream:
    """The pooled upstream client: httpx's API over aiohttp's transport (measured faster)."""

    def __init__(self, server: ServerConfig) -> None:
        self.server = server
        limits = httpx.Limits(max_connections=1000, max_keepalive_connections=200)
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

    async def aclose(self) -> None:
        await self.client.aclose()

    async def open(self, endpoint: EndpointConfig, call: UpstreamCall) -> Opened:
        """One attempt: returns with the first bytes in hand, or raises AttemptFailed."""
        started = time.perf_counter()
        try:
            async with asyncio.timeout(self.server.first_byte_timeout_s):
                response = await self.client.send(self._request(endpoint, call), stream=True)
                rest = response.aiter_raw()
                try:
                    first = await self._first_bytes(endpoint, response, rest, call.stream)
                except BaseException:
                    await response.aclose()
                    raise
        except TimeoutError:
            raise AttemptFailed(endpoint.id, "first_byte_timeout") from None
        except httpx.HTTPError as exc:
            raise AttemptFailed(endpoint.id, type(exc).__name__) from None
        return Opened(endpoint, response, first, rest, started)

    def _request(self, endpoint: EndpointConfig, call: UpstreamCall) -> httpx.Request:
        body = dict(call.body)
        body["model"] = endpoint.models[call.model]
        headers = {
            "content-type": "application/json",
            "accept-encoding": "identity",
            "x-request-id": call.request_id,
        }
        key = endpoint.api_key()
        if key:
            headers["authorization"] = f"Bearer {key}"
        tracing.inject(headers)
        url = endpoint.base_url.rstrip("/") + call.path
        return self.client.build_request("POST", url, headers=headers, content=json.dumps(body))

    async def _first_bytes(
        self,
        endpoint: EndpointConfig,
        response: httpx.Response,
        chunks: AsyncIterator[bytes],
        stream: bool,
    ) -> bytes:
        status = response.status_code
        if status >= 300 and status not in CLIENT_FAULT_STATUSES:
            await _raise_for_status(endpoint, response)
        if not stream or status >= 300:
            return _redacted(endpoint, b"".join([chunk async for chunk in chunks]))
        async for chunk in chunks:
            if chunk:
                return chunk
        raise AttemptFailed(endpoint.id, "empty_stream")


def _redacted(endpoint: EndpointConfig, body: bytes) -> bytes:
    """A whole body minus the endpoint's API key, should a careless upstream echo it."""
    key = endpoint.api_key()
    return body.replace(key.encode(), b"[redacted]") if key else body


async def _raise_for_status(endpoint: EndpointConfig, response: httpx.Response) -> None:
    body = await response.aread()
    status = response.status_code
    verdict = classify_error(status, response.headers, body, now=time.time())
    failure = AttemptFailed(
        endpoint.id, f"status_{status}", status=status, retry_after_s=verdict.cooldown_s
    )
    failure.quota_exhausted = verdict.unavailable
    raise failure


async def relay(
    opened: Opened, watch: StreamWatch, on_end: Callable[[str], None]
) -> AsyncIterator[bytes]:
    """Yield the upstream's SSE bytes as received; end with an error event on failure.

    `on_end` receives the outcome: ok, upstream_error (mid-stream failure or a stream that
    stopped without [DONE]) or cancelled (the client went away). `on_end` must not await: on a
    client disconnect this generator runs inside a cancelled scope, so the caller closes the
    upstream response (which cancels the request upstream) from a background task.
    """
    outcome = "cancelled"
    try:
        watch.feed(opened.first)
        yield opened.first
        async for chunk in opened.rest:
            watch.feed(chunk)
            yield chunk
        outcome = "ok" if watch.done or watch.upstream_error else "upstream_error"
        if outcome != "ok":
            yield error_event("The upstream ended the stream early.", "upstream_stream_truncated")
    except httpx.HTTPError:
        outcome = "upstream_error"
        yield error_event("The upstream failed mid-stream.", "upstream_stream_interrupted")
    finally:
        on_end(outcome)

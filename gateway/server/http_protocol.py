"""The HTTP/1.1 protocol `slo-gateway serve` runs: uvicorn's httptools protocol with a bound on
the request head (request line and headers) and deadlines for the head and the body.

Size: httptools (llhttp) has no limit on the request head and uvicorn sets none, so one client
could grow a single request head until the process runs out of memory. Two checks bound it: a
complete head larger than `max_head_bytes` is refused before any app sees it, and a head still
incomplete after that many bytes (counted per read, so within one read of the bound) is refused
without waiting for its end. The answer is a 431 in OpenAI's error shape, and the connection
is closed.

Time: uvicorn times out only idle keep-alive connections, and any byte cancels that, so a
client sending its head one byte at a time (slowloris), or its body, held a connection and its
task forever. Here a head must be whole within `header_timeout_s` of the connection opening (the
first request) or of its first byte (later ones), and a body within `body_timeout_s` of its
head's end; else a 408 in OpenAI's error shape, and the connection is closed. A body cut that
way reaches the app as a disconnect with `BODY_TIMED_OUT` set in the request's state, so the
app records the 408 it was answered with. One timer per connection at most, and none for a
request that arrives in one read (the usual case): the deadlines cost nothing on the hot path.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.config.settings import ServerConfig
from gateway.errors import GatewayError, InvalidRequest, RequestTimeout

# A key of the request's scope["state"]: the body deadline (s) that cut it.
BODY_TIMED_OUT = "slo_gateway.body_timed_out"
_STATUS_LINES = {408: b"408 Request Timeout", 431: b"431 Request Header Fields Too Large"}


def raw_error(status: int, error: GatewayError) -> bytes:
    """A whole raw response, for requests refused before (or without) any app answering."""
    body = json.dumps(error.body()).encode()
    head = (
        b"HTTP/1.1 %s\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n"
    )
    return head % (_STATUS_LINES[status], len(body)) + body


def head_too_large(max_head_bytes: int) -> bytes:
    return raw_error(
        431,
        InvalidRequest(
            f"The request line and headers exceed the gateway's limit of {max_head_bytes} bytes.",
            code="request_header_fields_too_large",
        ),
    )


def too_slow(part: str, timeout_s: float) -> RequestTimeout:
    return RequestTimeout(
        f"The request {part} did not arrive within the gateway's {timeout_s:g} s limit.",
        code="request_timeout",
    )


class HeadTooLarge(Exception):
    """Raised in a parser callback to stop parsing; uvicorn then calls send_400_response."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    max_head_bytes = 32 * 1024
    header_timeout_s = 10.0
    body_timeout_s = 60.0
    # Per connection from the first assignment on.
    _head_bytes = 0
    _awaiting_head = True
    _request_ended = False  # during the current read
    _head_refused = False
    _timer: asyncio.TimerHandle | None = None  # the head's deadline, or the body's

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(cast(asyncio.Transport, transport))
        self._arm(self.header_timeout_s, self._head_timed_out)  # even if it never sends a byte

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._request_ended = False
        super().data_received(data)
        if self.transport.is_closing():
            self._disarm()
            return
        # A read in which a request ended holds its body's end, not only the next head's start.
        if self._awaiting_head and not self._request_ended:
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head_bytes:
                self._refuse(head_too_large(self.max_head_bytes))
                return
        if self._timer is None:
            self._time_the_rest()

    def _time_the_rest(self) -> None:
        """A head or a body left incomplete by this read: start its deadline."""
        if not self._awaiting_head:
            self._arm(self.body_timeout_s, self._body_timed_out)
        elif self._head_bytes:
            self._arm(self.header_timeout_s, self._head_timed_out)

    def on_headers_complete(self) -> None:
        self._awaiting_head = False
        self._disarm()
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self.max_head_bytes:
            self._head_refused = True
            raise HeadTooLarge()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()
        self._awaiting_head, self._head_bytes, self._request_ended = True, 0, True

    def send_400_response(self, msg: str) -> None:
        if self._head_refused:
            self._refuse(head_too_large(self.max_head_bytes))
        else:
            super().send_400_response(msg)

    def _head_timed_out(self) -> None:
        self._timer = None
        if self._awaiting_head and not self.transport.is_closing():
            self._refuse(raw_error(408, too_slow("line and headers", self.header_timeout_s)))

    def _body_timed_out(self) -> None:
        self._timer = None
        if self._awaiting_head or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_started:
            self.scope["state"][BODY_TIMED_OUT] = self.body_timeout_s
            self._refuse(raw_error(408, too_slow("body", self.body_timeout_s)))
        else:  # answered already (without reading the body): only the connection is left
            self.transport.close()

    def _refuse(self, response: bytes) -> None:
        self._awaiting_head = False
        self._disarm()
        self.transport.write(response)
        self.transport.close()

    def _arm(self, delay_s: float, callback: Callable[[], None]) -> None:
        self._disarm()
        self._timer = self.loop.call_later(delay_s, callback)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def bounded_protocol(server: ServerConfig) -> type[BoundedHttpToolsProtocol]:
    """The protocol class to pass to uvicorn as `http=`, with the server section's limits."""
    limits = {
        "max_head_bytes": server.max_header_bytes,
        "header_timeout_s": server.header_timeout_s,
        "body_timeout_s": server.body_timeout_s,
    }
    return type("BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,), limits)

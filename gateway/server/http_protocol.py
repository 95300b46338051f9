"""The HTTP/1.1 protocol `slo-gateway serve` runs: uvicorn's httptools protocol with a bound on
the request head (request line and headers).

httptools (llhttp) has no limit on the request head and uvicorn sets none, so one client could
grow a single request head until the process runs out of memory. Two checks bound it:
a complete head larger than `max_head_bytes` is refused before any app sees it, and a head still
incomplete after that many bytes (counted per read, so within one read of the bound) is refused
without waiting for its end. Either way the answer is a 431 in OpenAI's error shape and the
connection is closed.
"""

from __future__ import annotations

import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.errors import InvalidRequest


def head_too_large(max_head_bytes: int) -> bytes:
    """The raw 431 response, whole, since no ASGI app sees a request refused this early."""
    error = InvalidRequest(
        f"The request line and headers exceed the gateway's limit of {max_head_bytes} bytes.",
        code="request_header_fields_too_large",
    )
    body = json.dumps(error.body()).encode()
    head = (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
        b"content-type: application/json\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
    )
    return head + body


class HeadTooLarge(Exception):
    """Raised in a parser callback to stop parsing; uvicorn then calls send_400_response."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    max_head_bytes = 32 * 1024
    # Per connection from the first assignment on.
    _head_bytes = 0
    _awaiting_head = True
    _request_ended = False  # during the current read
    _head_refused = False

    def data_received(self, data: bytes) -> None:
        self._request_ended = False
        super().data_received(data)
        # A read in which a request ended holds its body's end, not only the next head's start.
        if self._awaiting_head and not self._request_ended and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head_bytes:
                self._refuse()

    def on_headers_complete(self) -> None:
        self._awaiting_head = False
        size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        if size > self.max_head_bytes:
            self._head_refused = True
            raise HeadTooLarge()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._awaiting_head, self._head_bytes, self._request_ended = True, 0, True

    def send_400_response(self, msg: str) -> None:
        if self._head_refused:
            self._refuse()
        else:
            super().send_400_response(msg)

    def _refuse(self) -> None:
        self._awaiting_head = False
        self.transport.write(head_too_large(self.max_head_bytes))
        self.transport.close()


def bounded_protocol(max_head_bytes: int) -> type[BoundedHttpToolsProtocol]:
    """The protocol class to pass to uvicorn as `http=`."""
    return type(
        "BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,), {"max_head_bytes": max_head_bytes}
    )

"""The one ASGI middleware around every request: it names each request, and records the API
requests (paths under /v1/).

Naming: a well-formed `x-request-id` from the client is kept as the request's label, else one
is made; handlers find it in `request.state.request_id`, and the response echoes it. The label
is only logged, forwarded and echoed: clients may repeat it, so whatever is keyed by request
(leases, reservations) uses `request.state.gateway_id`, which the gateway mints for every
request (the same string as the label when the client gave none).

Recording: per API request it opens the record (gateway/telemetry/record.py) that the route
finds in `request.state.record` and passes to the router, makes the request span current
(gateway/telemetry/tracing.py, when tracing is on), watches what is sent back (the status, and
the error code: a refusal's `x-slo-gateway-reason`, else the error body's), and at the very end
(after the last byte of a stream) sets the span's attributes, counts the request in
`slo_gateway_requests_total` with its outcome (every API request, answered or refused, once)
and writes one log line (gateway/telemetry/request_log.py).

Both are one layer, so each message sent (every chunk of a stream) passes one wrapper, not two.
"""

from __future__ import annotations

import itertools
import re
import secrets
import time
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.telemetry import request_log, tracing
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.record import RequestRecord

API_PREFIX = "/v1/"
REFUSALS = (429, 503)  # the statuses of a refusal, which names its code in a header
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# A random per-process prefix and a counter: unique across replicas and restarts in practice,
# at a fraction of uuid4's cost per request.
_ID_PREFIX = secrets.token_hex(8)
_ID_COUNTER = itertools.count()


class RequestMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        *,
        metrics: Metrics,
        request_log: bool = True,
        log_prompts: bool = False,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.request_log = request_log
        self.log_prompts = log_prompts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        gateway_id = mint_request_id()
        request_id = _incoming_id(scope) or gateway_id
        state = scope.setdefault("state", {})
        state["request_id"], state["gateway_id"] = request_id, gateway_id
        named = (b"x-request-id", request_id.encode())
        if not scope["path"].startswith(API_PREFIX):
            await self.app(scope, receive, _naming(send, named))
            return
        record = RequestRecord(request_id, scope["method"], scope["path"], time.perf_counter())
        state["record"] = record

        async def recorded(message: Message) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
                if record.status in REFUSALS:
                    record.error_code = _reason(message.get("headers", ()))
                # The tenant's x-ratelimit-* headers go on every answer, refusals included.
                message["headers"] = [*message.get("headers", ()), named, *record.limit_headers]
            elif record.status >= 400 and record.error_code is None:
                record.error_code = request_log.error_code(message.get("body", b""), record.status)
            await send(message)

        try:
            with tracing.request_span(scope) as span:
                try:
                    await self.app(scope, receive, recorded)
                finally:
                    self._close(record, state.get("tenant"))
                    tracing.close_request(span, record)
        finally:
            self.metrics.count_request(record, request_log.outcome(record))
            if self.request_log:
                request_log.emit(record, prompts=self.log_prompts)

    @staticmethod
    def _close(record: RequestRecord, tenant: str | None) -> None:
        """An exception escaping here becomes the server's 500 (ServerErrorMiddleware)."""
        record.tenant = record.tenant or tenant
        if record.status == 0:
            record.status = 500
            record.error_code = record.error_code or "internal_error"


def _reason(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """A refusal's code from its `x-slo-gateway-reason`: on the Anthropic routes the body has
    no code (only a type), and the outcome (`rejected`) is read from the code."""
    for name, value in headers:
        if name == b"x-slo-gateway-reason":
            return value.decode("latin-1")
    return None


def _naming(send: Send, named: tuple[bytes, bytes]) -> Send:
    async def send_named(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", ()), named]
        await send(message)

    return send_named


def mint_request_id() -> str:
    """The gateway's own id for a request, never equal to another this process minted."""
    return f"{_ID_PREFIX}{next(_ID_COUNTER):08x}"


def _incoming_id(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            text = value.decode("latin-1")
            return text if _REQUEST_ID.match(text) else None
    return None

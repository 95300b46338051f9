"""The ASGI middleware that observes every API request (paths under /v1/).

Per request it opens the record that the handler, router and finisher note into
(gateway/record.py), makes the request span current (gateway/tracing.py, when tracing is on),
watches what is sent back (the status, and the error code of an error body), and at the very end
(after the last byte of a stream) sets the span's attributes and writes one log line
(gateway/logs.py). It must sit inside RequestIdMiddleware, which names the request.
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway import logs, tracing
from gateway import record as records
from gateway.record import RequestRecord

API_PREFIX = "/v1/"


class RequestObserver:
    def __init__(
        self, app: ASGIApp, *, request_log: bool = True, log_prompts: bool = False
    ) -> None:
        self.app = app
        self.request_log = request_log
        self.log_prompts = log_prompts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(API_PREFIX):
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        record = RequestRecord(
            state.get("request_id", ""), scope["method"], scope["path"], time.perf_counter()
        )

        async def observed(message: Message) -> None:
            if message["type"] == "http.response.start":
                record.status = message["status"]
            elif record.status >= 400 and record.error_code is None:
                record.error_code = logs.error_code(message.get("body", b""), record.status)
            await send(message)

        token = records.begin(record)
        try:
            with tracing.request_span(scope) as span:
                try:
                    await self.app(scope, receive, observed)
                finally:
                    self._close(record, state.get("tenant"))
                    tracing.close_request(span, record)
        finally:
            records.end(token)
            if self.request_log:
                logs.emit(record, prompts=self.log_prompts)

    @staticmethod
    def _close(record: RequestRecord, tenant: str | None) -> None:
        """An exception escaping here becomes the server's 500 (ServerErrorMiddleware)."""
        record.tenant = record.tenant or tenant
        if record.status == 0:
            record.status = 500
            record.error_code = record.error_code or "internal_error"

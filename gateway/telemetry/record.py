"""What happened to one API request, noted as it goes and read once, at its end.

The request observer (gateway/server/middleware.py) opens a `RequestRecord` for every API request and
makes it current for the request's context. It is a ContextVar, so the tasks a request starts
(the failover attempt, the task relaying a stream) copy it and note into the same object. The
API handler, the router and the finisher note what they learn; at the end the observer writes
the log line (gateway/telemetry/request_log.py) and the request span's attributes (gateway/telemetry/tracing.py) from it.
Noting outside an observed request does nothing.
"""

from __future__ import annotations

from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from policies.base import Ranking, RouteRequest

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from gateway.core.outcomes import Finished


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    method: str
    path: str
    started_s: float  # perf_counter at arrival
    status: int = 0  # the status sent to the client
    error_code: str | None = None  # from the error body the client got
    tenant: str | None = None
    route: RouteRequest | None = None
    body: dict[str, Any] | None = None  # by reference; serialized only when prompts are logged
    ranking: Ranking | None = None
    queued_s: float = 0.0
    endpoint_id: str | None = None  # the last endpoint tried
    attempts: int = 0
    result: Finished | None = None
    upstream_span: Span | None = None  # the open span of the attempt that answered


_current: ContextVar[RequestRecord | None] = ContextVar("slo_gateway_request", default=None)


def begin(record: RequestRecord) -> Token[RequestRecord | None]:
    return _current.set(record)


def end(token: Token[RequestRecord | None]) -> None:
    _current.reset(token)


def current() -> RequestRecord | None:
    return _current.get()


def note_route(route: RouteRequest, body: dict[str, Any]) -> None:
    record = _current.get()
    if record is not None:
        record.route = route
        record.tenant = route.tenant
        record.body = body


def note_ranking(ranking: Ranking, queued_s: float) -> None:
    record = _current.get()
    if record is not None:
        record.ranking = ranking
        record.queued_s = queued_s


def note_attempt(endpoint_id: str) -> None:
    record = _current.get()
    if record is not None:
        record.endpoint_id = endpoint_id
        record.attempts += 1


def note_result(result: Finished) -> None:
    record = _current.get()
    if record is not None:
        record.result = result

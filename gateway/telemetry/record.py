"""What happened to one API request, noted as it goes and read once, at its end.

The request middleware (gateway/server/middleware.py) opens a `RequestRecord` for every API
request and hands it to the route, which passes it to `Router.handle`; the router and the
finisher note into it what they learn. At the end the middleware writes the log line
(gateway/telemetry/request_log.py) and the request span's attributes
(gateway/telemetry/tracing.py) from it. The record is passed explicitly: no module finds it
through ambient state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from policies.base import Ranking, RouteRequest

if TYPE_CHECKING:
    from opentelemetry.trace import Span


class Finished(NamedTuple):
    """The observed result of one request on one endpoint (a NamedTuple: built once per
    request, where a frozen dataclass's __init__ cost four times as much)."""

    outcome: str  # ok, upstream_error, cancelled, client_error
    status: int
    prompt_tokens: int
    output_tokens: int
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float
    cached_tokens: int | None = None  # of the prompt, found in the upstream's prompt cache
    response_id: str | None = None  # what the answer says of itself (gen_ai.response.*)
    response_model: str | None = None
    finish_reasons: tuple[str, ...] = ()


class Reservation(NamedTuple):
    """A tenant's (or a key's) limit admission as the record keeps it (`TenantTicket`,
    gateway/core/admission_control.py): the tokens window slot its reservation went to (None:
    no token limit), the tokens still reserved, those charged to the window as the stream ran,
    and the cost held against the budget."""

    slot: int | None = None
    reserved: int = 0
    charged: int = 0
    held_pusd: int = 0


NO_RESERVATION = Reservation()


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
    slo_met: bool | None = None  # the one judgement (gateway/core/slo.py), None when unjudged
    upstream_span: Span | None = None  # the open span of the attempt that answered
    # Tenant accounting (gateway/core/accounting.py): the tenant's reservation, the
    # x-ratelimit-* headers every answer carries, and the request's cost at the answering
    # endpoint's prices.
    reservation: Reservation = NO_RESERVATION
    limit_headers: tuple[tuple[bytes, bytes], ...] = ()
    cost_pusd: int = 0
    # An API key's (gateway/config/api_records.py): the name its usage (and its own limits and
    # budget, if any) count under, and its reservation, charged and settled like the tenant's.
    key_subject: str | None = None
    key_reservation: Reservation = NO_RESERVATION
    # The models to try, in order, when the requested one cannot serve the request (config
    # `fallbacks` and `context_fallbacks`, less those the caller's key may not use or its API
    # does not serve: gateway/core/fallback_chain.py); when one served it, the model asked for
    # and why it could not (unavailable, refused, context).
    fallbacks: tuple[str, ...] = ()
    context_fallbacks: tuple[str, ...] = ()
    requested_model: str | None = None
    fallback_reason: str | None = None

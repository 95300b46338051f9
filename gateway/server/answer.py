"""`Responder`: the answer an endpoint gave, relayed to the client, whole or streamed.

Besides the upstream's body the client gets headers that explain the routing decision
(`explain`); configured secrets are redacted from error bodies and events
(gateway/upstream/redaction.py); a whole answer goes in two ASGI messages, a stream event by
event through gateway/upstream/relay.py, its tokens charged to the tenant's window as they come.
The finisher records the outcome (leases, statistics, SLO), the prefix index learns what the
engine found cached, and a stored response's endpoint is remembered for the calls that follow.
"""

from __future__ import annotations

import time

from starlette.types import Send

from gateway.config.settings import ServerConfig
from gateway.core.decision_pipeline import DecisionPipeline
from gateway.core.progress import StreamProgress
from gateway.server.admission_queue import LiveAdmission, Waiter
from gateway.server.exchange import Exchange
from gateway.server.finisher import Finisher, body_result, stream_result
from gateway.server.forwarding import Routed
from gateway.server.response_owners import ResponseOwners
from gateway.telemetry import tracing
from gateway.telemetry.record import Finished
from gateway.upstream.client import Opened
from gateway.upstream.grammar import (
    UNDESCRIBED,
    Facts,
    StreamGrammar,
    describe,
    parse_whole,
    restamp_whole,
)
from gateway.upstream.redaction import Redactor
from gateway.upstream.relay import relay
from policies.base import Ranking, RouteRequest

STREAM_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def explain(
    endpoint_id: str, attempts: int, ranking: Ranking, request: RouteRequest
) -> dict[str, str]:
    """The response headers that say which endpoint answered and why: its decision (the
    policy's reason), and for SLO-aware routing the predictions it judged."""
    headers = {
        "x-slo-gateway-endpoint": endpoint_id,
        "x-slo-gateway-class": request.slo.name,
        "x-slo-gateway-model": request.model,  # the one served (a fallback's, if one was)
        "x-slo-gateway-attempts": str(attempts),
    }
    if ranking.reason:
        headers["x-slo-gateway-decision"] = ranking.reason
    # the prefix index's prediction for the endpoint that answered (gateway/core/prefix_index.py)
    cached = request.cached_tokens.get(endpoint_id, 0.0)
    headers["x-slo-gateway-predicted-cached-tokens"] = f"{cached:.0f}"
    if ranking.predicted_ttft_s is not None:
        headers["x-slo-gateway-predicted-ttft-ms"] = f"{ranking.predicted_ttft_s * 1e3:.0f}"
        headers["x-slo-gateway-at-risk"] = "true" if ranking.at_risk else "false"
    if ranking.predicted_ttft_p95_s is not None:
        headers["x-slo-gateway-predicted-ttft-p95-ms"] = _ms(ranking.predicted_ttft_p95_s)
    if ranking.predictions:  # the first endpoint's, as the TTFT p95 above: a load test's coverage
        headers["x-slo-gateway-predicted-tpot-p95-ms"] = _ms(ranking.predictions[0].tpot_p95_s)
    if ranking.binding and ranking.binding_p95_s is not None and ranking.binding_target_s:
        # which of the class's targets binds, the p95 judged against it, and the target
        headers["x-slo-gateway-binding-target"] = ranking.binding
        headers["x-slo-gateway-judged-p95-ms"] = _ms(ranking.binding_p95_s)
        headers["x-slo-gateway-target-ms"] = _ms(ranking.binding_target_s)
    return headers


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f}"


async def send_whole(send: Send, status: int, headers: dict[str, str], body: bytes) -> None:
    raw = [*raw_headers(headers), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def raw_headers(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


class Responder:
    def __init__(
        self,
        server: ServerConfig,
        pipeline: DecisionPipeline[Waiter],
        admission: LiveAdmission,
        finisher: Finisher,
        owners: ResponseOwners,
        redactor: Redactor,
    ) -> None:
        """`pipeline`: whose prefix index learns what the engine found cached; `admission`:
        which charges a stream's tokens to its tenant as they come; `redactor` may be swapped
        on a config reload."""
        self.server = server
        self.pipeline = pipeline
        self.admission = admission
        self.finisher = finisher
        self.owners = owners
        self.redactor = redactor

    async def respond(self, exchange: Exchange, routed: Routed) -> None:
        """Relay the answer `routed` opened, then record it."""
        request, call, record = exchange.request, exchange.call, exchange.record
        opened = routed.opened
        headers = explain(opened.endpoint.id, routed.attempts, routed.ranking, request)
        headers |= opened.relayed_headers()
        headers["x-slo-gateway-upstream-model"] = opened.endpoint.models[call.model]
        if record.requested_model is not None and record.fallback_reason is not None:
            headers["x-slo-gateway-requested-model"] = record.requested_model
            headers["x-slo-gateway-fallback"] = record.fallback_reason
        headers.update(call.reply_headers)
        if opened.watch is None:  # a whole answer: not streamed, or an error status
            await self._whole(exchange, opened, headers)
        else:
            await self._streamed(exchange, opened, opened.watch, headers)

    async def _whole(self, exchange: Exchange, opened: Opened, headers: dict[str, str]) -> None:
        request, call = exchange.request, exchange.call
        whole = parse_whole(opened.first) if opened.status < 300 else None
        facts = call.grammar.facts(whole) if whole is not None else Facts()
        # the answer's id, model and finish reasons: only the request's span reads them
        described = describe(whole) if whole is not None and tracing.enabled() else UNDESCRIBED
        result = body_result(opened, facts, request.prompt_tokens, described)
        self.finisher.finish(opened, request, result, exchange.record)
        body = self.redactor.body(opened.status, opened.first)
        if whole is not None and self.server.response_model == "public":
            body = restamp_whole(body, whole, call.model)
        if call.store and facts.response_id:
            await self.owners.remember(facts.response_id, opened.endpoint, call, request, result)
        await send_whole(exchange.send, opened.status, headers, body)
        self._answered(exchange, opened, result)

    async def _streamed(
        self, exchange: Exchange, opened: Opened, watch: StreamGrammar, headers: dict[str, str]
    ) -> None:
        request, call, record = exchange.request, exchange.call, exchange.record
        if call.store and watch.response_id:
            await self.owners.remember(watch.response_id, opened.endpoint, call, request)
        outcome, progress = "cancelled", StreamProgress()
        seen = self.finisher.watching(opened, request, progress)  # first token, stretches
        seen = self.admission.charging(request, record, seen)  # tokens to the tenant's window
        try:
            relayed = raw_headers(headers | STREAM_HEADERS)
            send, receive = exchange.send, exchange.receive
            outcome = await relay(opened, watch, relayed, self.redactor, receive, send, seen)
        finally:
            result = stream_result(opened, watch, outcome, request.prompt_tokens)
            self.finisher.finish(opened, request, result, record, progress)
            self._answered(exchange, opened, result)
        if call.store and watch.response_id:  # again, with the tokens it took
            await self.owners.remember(
                watch.response_id, opened.endpoint, call, request, result, created=False
            )

    def _answered(self, exchange: Exchange, opened: Opened, result: Finished) -> None:
        """The prefix index calibrated by what the engine found cached."""
        endpoint_id, request, chain = opened.endpoint.id, exchange.request, exchange.chain
        self.pipeline.answered(endpoint_id, request, chain, result, time.time())

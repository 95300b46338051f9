"""`Router.handle`: one request's whole lifecycle, admit -> rank -> forward -> relay -> record.

The API route (gateway/server/openai_routes.py) parses and classifies the request, then hands it
here as an `Exchange` (gateway/server/exchange.py); everything from there to the last byte
happens in `handle`, in order:
1. the prompt's prefix looked up, tenant limits, the context window, then the candidates in
   rotation, admission (thresholds, the prediction, the deadline queue) and the policy's
   ranking: the decision pipeline (gateway/core/decision_pipeline.py), the same code the
   offline simulator runs, driven here on the wall clock by `LiveAdmission`; a model that
   cannot serve the request hands it to the next of its fallback chain
   (gateway/core/fallback_chain.py);
2. forwarding along the ranking with failover before the first byte (`Forwarder`,
   gateway/server/forwarding.py);
3. the answer relayed to the client, whole or streamed, and recorded (`Responder`,
   gateway/server/answer.py);
4. the tenant's concurrency slot given back and its usage settled.
A refusal or a failure before the response starts is raised as a `GatewayError`, which the API
layer renders in its own error shape; after it, the relay ends the stream with an error event.
Snapshots come from local state (the shared view refreshed in the background and the latest
scrapes), so deciding costs no round trip.
"""

from __future__ import annotations

import dataclasses
import time

from gateway.core.context_window import context_exceeded, needed_tokens, overflowed
from gateway.core.decision_pipeline import DecisionPipeline
from gateway.core.fallback_chain import FallbackChain, FallbackReason, fallback_reason
from gateway.errors import GatewayError
from gateway.server.admission_queue import LiveAdmission, Waiter
from gateway.server.answer import Responder
from gateway.server.decision_log import DecisionLog
from gateway.server.exchange import Exchange
from gateway.server.forwarding import ClientGone, Forwarder, Routed
from gateway.telemetry import tracing
from gateway.telemetry.metrics import Metrics
from policies.base import Ranking


class Router:
    def __init__(
        self,
        pipeline: DecisionPipeline[Waiter],
        admission: LiveAdmission,
        forwarder: Forwarder,
        responder: Responder,
        decisions: DecisionLog,
        metrics: Metrics,
    ) -> None:
        self.pipeline = pipeline
        self.admission = admission
        self.forwarder = forwarder
        self.responder = responder
        self.decisions = decisions
        self.metrics = metrics

    async def handle(self, exchange: Exchange) -> None:
        """Serve one request, start to end (the module's docstring lists the steps)."""
        request, record = exchange.request, exchange.record
        exchange.request, exchange.chain = self.pipeline.annotate(request, exchange.call.body)
        record.route, record.tenant = exchange.request, request.tenant
        with tracing.span("tenant_limits"):
            await self.admission.admit_tenant(exchange.request, record)
        try:
            routed = await self._serve(exchange)
            endpoint_id = routed.opened.endpoint.id
            self.pipeline.sent(endpoint_id, exchange.request, exchange.chain, time.time())
        except ClientGone:
            await exchange.send({"type": "http.response.start", "status": 499, "headers": []})
            await exchange.send({"type": "http.response.body", "body": b""})
            return
        else:
            await self.responder.respond(exchange, routed)
        finally:
            self.admission.finished(record.route or exchange.request, record)

    async def _serve(self, exchange: Exchange) -> Routed:
        """Routed to the requested model, else along its fallback chain (the models, and when
        one may stand in for another: gateway/core/fallback_chain.py)."""
        record = exchange.record
        chain = FallbackChain(exchange.request.model, record.fallbacks, record.context_fallbacks)
        while True:
            try:
                routed = await self._serve_model(exchange)
            except GatewayError as error:
                reason = fallback_reason(error) if exchange.call.owner is None else None
                model = chain.next(reason) if reason is not None else None
                if model is None or reason is None:
                    raise
                self._fall_back(exchange, model, reason)
                continue
            if record.requested_model is not None:
                served = (record.requested_model, exchange.request.model, record.fallback_reason)
                self.metrics.fallbacks.labels(*served).inc()
            return routed

    def _fall_back(self, exchange: Exchange, model: str, reason: FallbackReason) -> None:
        """Serve `model` instead, standing in for the one asked for."""
        record = exchange.record
        record.requested_model = record.requested_model or exchange.request.model
        record.fallback_reason = reason.value
        record.result = record.slo_met = None  # the model before it served nothing
        record.route = exchange.request = exchange.request._replace(model=model)
        exchange.call = dataclasses.replace(exchange.call, model=model)

    async def _serve_model(self, exchange: Exchange) -> Routed:
        """Routed to the request's model, if it fits the model's context window: judged before
        from the prompt's estimate, and after from the engine's 400 (context_window.py)."""
        request, call = exchange.request, exchange.call
        window = self.pipeline.window(request.model, call.api)
        needed = needed_tokens(request.prompt_tokens, request.max_tokens)
        if window is not None and needed > window and not call.counting:
            raise context_exceeded(request.model, needed, window)
        routed = await self.forwarder.open(exchange, await self.decide(exchange))
        if overflowed(routed.opened.status, routed.opened.first):
            self.forwarder.refused(exchange, routed.opened)
            raise context_exceeded(request.model, needed, window)
        return routed

    async def decide(self, exchange: Exchange) -> Ranking:
        """Admit (maybe after queueing) and rank; the decision time excludes queueing."""
        request, call, record = exchange.request, exchange.call, exchange.record
        started = time.perf_counter()
        with tracing.span("admission"):
            admitted = await self.admission.admit(request, call.api, call.owner)
        ranking, deferred, waited_s = admitted
        self.metrics.decision.observe(max(0.0, time.perf_counter() - started - waited_s))
        requested = record.requested_model or request.model
        policy = self.pipeline.policy_name
        self.decisions.append(
            (time.time(), request, requested, ranking, policy, waited_s, deferred)
        )
        record.ranking, record.queued_s = ranking, waited_s
        return ranking

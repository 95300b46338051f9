"""`Router.handle`: one request's whole lifecycle, admit -> rank -> forward -> relay -> record.

The API route (gateway/server/openai_routes.py) parses and classifies the request, then hands it
here with its record; everything from there to the last byte happens in `handle`, in order:
1. tenant limits and the context window, then the decision pipeline
   (gateway/core/decision_pipeline.py, the code the offline simulator runs too, driven here on
   the wall clock by `LiveAdmission`): the candidates in rotation, admission (saturation,
   shedding, the prediction, the deadline queue) and the policy's ranking, kept to real
   candidates; a model that cannot serve the request hands it to the next of its fallback
   chain (gateway/core/fallback_chain.py); 2. forwarding along the ranking with failover
   before the first byte (tenacity after the first failed attempt, by gateway/core/failover.py's
   rules); 3. the answer relayed to the client, whole or streamed, with configured secrets
   redacted from error bodies and events (gateway/upstream/redaction.py); 4. accounting
   (leases, statistics, SLO, latency metrics) and the tenant's concurrency slot given back.
A refusal or a failure before the response starts is raised as a `GatewayError`, which the API
layer renders in its own error shape; after it, the relay ends the stream with an error event.
Snapshots come from local state (the shared view refreshed in the background and the latest
scrapes), so deciding costs no round trip.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.types import Receive, Send
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type

from gateway.config.settings import EndpointConfig, ServerConfig
from gateway.core.context_window import context_exceeded, needed_tokens, overflowed
from gateway.core.decision_pipeline import DecisionPipeline
from gateway.core.failover import backoff_s, final_error, gives_up
from gateway.core.fallback_chain import FallbackChain, FallbackReason, fallback_reason
from gateway.core.prefix_chain import PrefixChain
from gateway.core.progress import StreamProgress
from gateway.errors import AttemptFailed, GatewayError
from gateway.server.admission_queue import LiveAdmission, Waiter
from gateway.server.answer import STREAM_HEADERS, explain, raw_headers, send_whole
from gateway.server.decision_log import DecisionLog
from gateway.server.finisher import Finisher, body_result, stream_result
from gateway.server.response_owners import ResponseOwners
from gateway.telemetry import tracing
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.record import Finished, RequestRecord
from gateway.upstream.client import Opened, Upstream, UpstreamCall
from gateway.upstream.departure import Departure
from gateway.upstream.grammar import UNDESCRIBED, Facts, describe, parse_whole, restamp_whole
from gateway.upstream.redaction import Redactor
from gateway.upstream.relay import client_disconnected, commit, relay
from gateway.watch.endpoints import Registry
from policies.base import Ranking, RouteRequest


class ClientGone(Exception):
    """The client disconnected before the first byte; the upstream attempt was cancelled."""


@dataclass(slots=True)
class Routed:
    opened: Opened
    ranking: Ranking
    attempts: int


class Router:
    def __init__(
        self,
        server: ServerConfig,
        registry: Registry,
        pipeline: DecisionPipeline[Waiter],
        admission: LiveAdmission,
        upstream: Upstream,
        finisher: Finisher,
        metrics: Metrics,
        redactor: Redactor,
        owners: ResponseOwners,
        decisions: DecisionLog,
    ) -> None:
        self.server = server
        self.registry = registry
        self.pipeline = pipeline
        self.admission = admission
        self.upstream = upstream
        self.finisher = finisher
        self.metrics = metrics
        self.owners = owners
        self.redactor = redactor
        self.decisions = decisions

    async def handle(
        self,
        request: RouteRequest,
        call: UpstreamCall,
        record: RequestRecord,
        receive: Receive,
        send: Send,
    ) -> None:
        """Serve one request, start to end (the module's docstring lists the steps)."""
        request, chain = self.pipeline.annotate(request, call.body)
        record.route, record.tenant = request, request.tenant
        with tracing.span("tenant_limits"):
            await self.admission.admit_tenant(request, record)
        try:
            request, call, routed = await self._serve(request, call, record, receive)
            self.pipeline.sent(routed.opened.endpoint.id, request, chain, time.time())
        except ClientGone:
            await send({"type": "http.response.start", "status": 499, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        else:
            await self._respond(routed, chain, request, call, record, receive, send)
        finally:
            self.admission.finished(record.route or request, record)

    async def _serve(
        self, request: RouteRequest, call: UpstreamCall, record: RequestRecord, receive: Receive
    ) -> tuple[RouteRequest, UpstreamCall, Routed]:
        """Routed to the requested model, else along its fallback chain (the models, and when
        one may stand in for another: gateway/core/fallback_chain.py)."""
        chain = FallbackChain(request.model, record.fallbacks, record.context_fallbacks)
        while True:
            try:
                routed = await self._serve_model(request, call, record, receive)
            except GatewayError as error:
                reason = fallback_reason(error) if call.owner is None else None
                model = chain.next(reason) if reason is not None else None
                if model is None or reason is None:
                    raise
                request, call = self._fall_back(request, call, record, model, reason)
                continue
            if record.requested_model is not None:
                served = (record.requested_model, request.model, record.fallback_reason)
                self.metrics.fallbacks.labels(*served).inc()
            return request, call, routed

    def _fall_back(
        self,
        request: RouteRequest,
        call: UpstreamCall,
        record: RequestRecord,
        model: str,
        reason: FallbackReason,
    ) -> tuple[RouteRequest, UpstreamCall]:
        """The request and call for `model`, standing in for the one asked for."""
        record.requested_model = record.requested_model or request.model
        record.fallback_reason = reason.value
        record.result = record.slo_met = None  # the model before it served nothing
        record.route = request._replace(model=model)
        return record.route, dataclasses.replace(call, model=model)

    async def _serve_model(
        self, request: RouteRequest, call: UpstreamCall, record: RequestRecord, receive: Receive
    ) -> Routed:
        """Routed to the request's model, if it fits the model's context window: judged before
        from the prompt's estimate, and after from the engine's 400 (context_window.py)."""
        window = self.pipeline.window(request.model, call.api)
        needed = needed_tokens(request.prompt_tokens, request.max_tokens)
        if window is not None and needed > window and not call.counting:
            raise context_exceeded(request.model, needed, window)
        routed = await self._route(request, call, record, receive)
        opened = routed.opened
        if overflowed(opened.status, opened.first):
            result = body_result(opened, Facts(), 0)  # no prompt billed: the engine refused it
            self.finisher.finish(opened, request, result, record)
            raise context_exceeded(request.model, needed, window)
        return routed

    async def _route(
        self, request: RouteRequest, call: UpstreamCall, record: RequestRecord, receive: Receive
    ) -> Routed:
        ranking = await self.decide(request, call, record)
        return await self.open(call, request, ranking, record, lambda: client_disconnected(receive))

    async def _respond(
        self,
        routed: Routed,
        chain: PrefixChain,
        request: RouteRequest,
        call: UpstreamCall,
        record: RequestRecord,
        receive: Receive,
        send: Send,
    ) -> None:
        """`chain`: the prompt's block hashes, for the prefix index's calibration."""
        opened = routed.opened
        upstream_model = opened.endpoint.models[call.model]
        headers = explain(opened.endpoint.id, routed.attempts, routed.ranking, request)
        headers |= opened.relayed_headers()
        headers["x-slo-gateway-upstream-model"] = upstream_model
        if record.requested_model is not None and record.fallback_reason is not None:
            headers["x-slo-gateway-requested-model"] = record.requested_model
            headers["x-slo-gateway-fallback"] = record.fallback_reason
        headers.update(call.reply_headers)
        watch = opened.watch
        if watch is None:  # a whole answer: not streamed, or an error status
            result = await self._answer_whole(opened, request, call, record, headers, send)
            self.pipeline.answered(opened.endpoint.id, request, chain, result, time.time())
            return
        if call.store and watch.response_id:
            await self.owners.remember(watch.response_id, opened.endpoint, call, request)
        outcome, progress = "cancelled", StreamProgress()
        seen = self.finisher.watching(opened, request, progress)  # first token, stretches
        seen = self.admission.charging(request, record, seen)  # tokens to the tenant's window
        try:
            relayed = raw_headers(headers | STREAM_HEADERS)
            outcome = await relay(opened, watch, relayed, self.redactor, receive, send, seen)
        finally:
            result = stream_result(opened, watch, outcome, request.prompt_tokens)
            self.finisher.finish(opened, request, result, record, progress)
            self.pipeline.answered(opened.endpoint.id, request, chain, result, time.time())
        if call.store and watch.response_id:  # again, with the tokens it took
            await self.owners.remember(
                watch.response_id, opened.endpoint, call, request, result, created=False
            )

    async def _answer_whole(
        self,
        opened: Opened,
        request: RouteRequest,
        call: UpstreamCall,
        record: RequestRecord,
        headers: dict[str, str],
        send: Send,
    ) -> Finished:
        whole = parse_whole(opened.first) if opened.status < 300 else None
        facts = call.grammar.facts(whole) if whole is not None else Facts()
        # the answer's id, model and finish reasons: only the request's span reads them
        described = describe(whole) if whole is not None and tracing.enabled() else UNDESCRIBED
        result = body_result(opened, facts, request.prompt_tokens, described)
        self.finisher.finish(opened, request, result, record)
        body = self.redactor.body(opened.status, opened.first)
        if whole is not None and self.server.response_model == "public":
            body = restamp_whole(body, whole, call.model)
        if call.store and facts.response_id:
            await self.owners.remember(facts.response_id, opened.endpoint, call, request, result)
        await send_whole(send, opened.status, headers, body)
        return result

    async def decide(
        self, request: RouteRequest, call: UpstreamCall, record: RequestRecord
    ) -> Ranking:
        """Admit (maybe after queueing) and rank; the decision time excludes queueing."""
        started = time.perf_counter()
        with tracing.span("admission"):
            admitted = await self.admission.admit(request, call.api, call.owner)
        ranking, deferred, waited_s = admitted
        self.metrics.decision.observe(max(0.0, time.perf_counter() - started - waited_s))
        requested, policy = record.requested_model or request.model, self.pipeline.policy_name
        logged = (time.time(), request, requested, ranking, policy, waited_s, deferred)
        self.decisions.append(logged)
        record.ranking, record.queued_s = ranking, waited_s
        return ranking

    async def open(
        self,
        call: UpstreamCall,
        request: RouteRequest,
        ranking: Ranking,
        record: RequestRecord,
        disconnected: Callable[[], Awaitable[Any]],
    ) -> Routed:
        """Open the first endpoint that answers; give up if the client leaves first."""
        departure = Departure(disconnected)
        try:
            with departure:
                return await self._open(call, request, ranking, record)
        except asyncio.CancelledError:
            if not departure.left:
                raise  # cancelled from outside (shutdown), not by the client leaving
            departure.forgive()
            raise ClientGone() from None

    async def _open(
        self, call: UpstreamCall, request: RouteRequest, ranking: Ranking, record: RequestRecord
    ) -> Routed:
        """The first attempt runs directly (the common case, and cheaper); tenacity takes over
        only when it failed and the failure allows another."""
        order = [self.registry.endpoints[s.endpoint_id] for s in ranking.endpoints]
        try:
            return Routed(await self._attempt(order[0], call, request, record), ranking, 1)
        except AttemptFailed as failure:
            if self._gives_up(order, 1, failure):
                raise final_error(failure) from None
            wait_s = self._backoff_s(order, failure)
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        return await self._retry(order, call, request, ranking, record)

    async def _retry(
        self,
        order: Sequence[EndpointConfig],
        call: UpstreamCall,
        request: RouteRequest,
        ranking: Ranking,
        record: RequestRecord,
    ) -> Routed:
        """Attempts from the second on; tenacity's attempt n is the request's attempt n + 1."""
        retrying = AsyncRetrying(
            stop=self._stop(order),
            wait=self._wait(order),
            retry=retry_if_exception_type(AttemptFailed),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    number = attempt.retry_state.attempt_number + 1
                    endpoint = order[(number - 1) % len(order)]
                    opened = await self._attempt(endpoint, call, request, record)
                    return Routed(opened, ranking, number)
        except AttemptFailed as last:
            raise final_error(last) from None
        raise AssertionError("unreachable: tenacity either returns or re-raises")

    def _stop(self, order: Sequence[EndpointConfig]) -> Callable[[RetryCallState], bool]:
        def stop(state: RetryCallState) -> bool:
            failure = state.outcome.exception() if state.outcome else None
            return self._gives_up(order, state.attempt_number + 1, failure)

        return stop

    def _wait(self, order: Sequence[EndpointConfig]) -> Callable[[RetryCallState], float]:
        def wait(state: RetryCallState) -> float:
            failure = state.outcome.exception() if state.outcome else None
            return self._backoff_s(order, failure)

        return wait

    def _gives_up(
        self, order: Sequence[EndpointConfig], made: int, failure: BaseException | None
    ) -> bool:
        return gives_up(made, failure, order[made % len(order)].id, self.server)

    def _backoff_s(self, order: Sequence[EndpointConfig], failure: BaseException | None) -> float:
        return backoff_s(len(order), failure, self.server)

    async def _attempt(
        self,
        endpoint: EndpointConfig,
        call: UpstreamCall,
        request: RouteRequest,
        record: RequestRecord,
    ) -> Opened:
        predicted = record.ranking.predicted(endpoint.id) if record.ranking else None
        self.finisher.start(endpoint.id, request, self.admission.footprint(request), predicted)
        record.endpoint_id = endpoint.id
        record.attempts += 1
        try:
            with tracing.upstream_span(endpoint, call.path, call.model, record):
                opened = await self.upstream.open(endpoint, call)
                if call.stream and opened.status < 300:
                    public = call.model if self.server.response_model == "public" else None
                    watch = call.grammar.watch(opened.started_s, public)
                    opened = await commit(opened, watch, self.server.first_byte_timeout_s)
                return opened
        except AttemptFailed as failure:
            self.finisher.failed_attempt(endpoint.id, request, failure)
            raise
        except BaseException:
            self.finisher.abandoned(endpoint.id, request.request_id)
            raise

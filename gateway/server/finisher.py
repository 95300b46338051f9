"""The live request path's accounting: `Outcomes` (gateway/core/outcomes.py) on the wall clock,
plus the upstream's Prometheus series and the request's record. `slo_gateway_requests_total`
counts every API request, answered or not: the request middleware does it, from the record.

Over the memory store every write finishes at once, so none needs a task; over Redis the
observations do (the write-behind queues them), breaker and cool-down writes do not.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gateway.core.accounting import cost_pusd, usd
from gateway.core.outcomes import Outcomes, covered
from gateway.core.progress import StreamProgress
from gateway.errors import AttemptFailed
from gateway.state.background import Background, run_now
from gateway.state.leases import LeaseBook
from gateway.state.memory_store import MemoryStatsStore
from gateway.state.resilient import writes_at_once
from gateway.state.view import SharedView
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.record import Finished, RequestRecord
from gateway.upstream.client import Opened
from gateway.upstream.grammar import UNDESCRIBED, Described, Facts, StreamGrammar
from gateway.watch.endpoints import Registry
from gateway.watch.health import HealthChecker
from policies.base import Prediction, RouteRequest


class Finisher:
    def __init__(
        self,
        leases: LeaseBook,
        registry: Registry,
        health: HealthChecker,
        view: SharedView,
        metrics: Metrics,
        background: Background,
    ) -> None:
        self.leases = leases
        self.metrics = metrics
        at_once = writes_at_once(view.store)
        memory = isinstance(view.store, MemoryStatsStore)
        spawn = run_now if memory else background.spawn
        observe = run_now if at_once else background.spawn
        self.outcomes = Outcomes(leases, registry, health.breakers, view, spawn, observe=observe)

    def start(
        self,
        endpoint_id: str,
        request: RouteRequest,
        tokens: int,
        predicted: Prediction | None = None,
    ) -> None:
        self.outcomes.started(endpoint_id, request, tokens, predicted)

    def abandoned(self, endpoint_id: str, request_id: str) -> None:
        self.leases.drop(endpoint_id, request_id)

    def failed_attempt(
        self, endpoint_id: str, request: RouteRequest, failure: AttemptFailed
    ) -> None:
        self.outcomes.failed_attempt(endpoint_id, request, failure, time.time())
        result = "rate_limited" if failure.status == 429 else "failed"
        self.metrics.upstream_attempts.labels(endpoint_id, result).inc()

    def watching(
        self, opened: Opened, request: RouteRequest, progress: StreamProgress
    ) -> Callable[[StreamGrammar], float]:
        """What the relay tells of a running stream (gateway/upstream/relay.py's `Seen`): its
        first token, then its stretches, go to the statistics at once (gateway/core/progress.py);
        `finish` then observes only the rest. Returns when the next stretch is due."""
        endpoint_id, streamed = opened.endpoint.id, self.outcomes.streamed

        def seen(watch: StreamGrammar) -> float:
            last_s = watch.last_token_s
            if last_s is None:
                return 0.0
            tokens, ttft_s = watch.output_tokens, watch.ttft_s
            streamed(endpoint_id, request, progress, tokens, ttft_s, last_s, time.time())
            return progress.due_s if progress.started else 0.0

        return seen

    def finish(
        self,
        opened: Opened,
        request: RouteRequest,
        result: Finished,
        record: RequestRecord,
        progress: StreamProgress | None = None,
    ) -> None:
        """Account for a request that got an upstream response, and release that response;
        `progress`: its stream's, as `watching` kept it."""
        endpoint_id = opened.endpoint.id
        opened.release()
        limits = opened.headers if opened.endpoint.kind == "openai" else None
        missed = self.outcomes.finished(endpoint_id, request, result, limits, time.time(), progress)
        record.result, record.slo_met = result, None if missed is None else not missed
        self._usage(opened, request, result, record)
        self.metrics.upstream_attempts.labels(endpoint_id, result.outcome).inc()
        self._latency_histograms(endpoint_id, request, result)
        if record.ranking is not None:
            self._coverage(endpoint_id, request, result, record.ranking.predicted(endpoint_id))
        if missed is not None:
            verdict = "missed" if missed else "met"
            self.metrics.slo.labels(request.slo.name, request.tenant, endpoint_id, verdict).inc()
        if missed:
            self.metrics.slo_missed.labels(request.slo.name, request.tenant, missed).inc()

    def _usage(
        self, opened: Opened, request: RouteRequest, result: Finished, record: RequestRecord
    ) -> None:
        """The request's cost at the endpoint's prices, and the usage counters."""
        prompt, cached, completion = (
            result.prompt_tokens,
            result.cached_tokens or 0,  # None: the upstream did not say, none billed cached
            result.output_tokens,
        )
        record.cost_pusd = cost_pusd(opened.endpoint.price, prompt, cached, completion)
        labels = (request.tenant, request.slo.name, request.model, opened.endpoint.id)
        self.metrics.usage.add(labels, prompt, cached, completion, usd(record.cost_pusd))

    def _coverage(
        self,
        endpoint_id: str,
        request: RouteRequest,
        result: Finished,
        predicted: Prediction | None,
    ) -> None:
        """Whether its TTFT and TPOT came within the p95s predicted for it there."""
        if predicted is None or result.outcome != "ok":
            return
        measured = (
            ("ttft", result.ttft_s, predicted.ttft_p95_s),
            ("tpot", result.tpot_s, predicted.tpot_p95_s),
        )
        for signal, measured_s, p95_s in measured:
            within = covered(measured_s, p95_s)
            if within is not None:
                labels = (endpoint_id, request.slo.name, signal, "within" if within else "beyond")
                self.metrics.coverage.labels(*labels).inc()

    def _latency_histograms(
        self, endpoint_id: str, request: RouteRequest, result: Finished
    ) -> None:
        if result.ttft_s is not None:
            self.metrics.ttft.labels(endpoint_id, request.model).observe(result.ttft_s)
        if result.tpot_s is not None:
            self.metrics.tpot.labels(endpoint_id, request.model).observe(result.tpot_s)


def stream_result(opened: Opened, watch: StreamGrammar, outcome: str, prompt: int) -> Finished:
    """A relayed stream, as its grammar read it; `prompt`: the estimate, should it say none."""
    reported = watch.prompt_tokens
    return Finished(
        outcome=outcome,
        status=opened.status,
        prompt_tokens=reported if reported is not None else prompt,
        output_tokens=watch.output_tokens,
        ttft_s=watch.ttft_s,
        tpot_s=watch.tpot_s,
        e2e_s=time.perf_counter() - opened.started_s,
        cached_tokens=watch.cached_tokens,
        response_id=watch.described.upstream_id,
        response_model=watch.described.model,
        finish_reasons=watch.described.finish_reasons,
    )


def body_result(
    opened: Opened, facts: Facts, prompt: int, described: Described = UNDESCRIBED
) -> Finished:
    """A whole answer: no TTFT; tokens from what its grammar read in the body (`facts`)."""
    status = opened.status
    return Finished(
        outcome="ok" if status < 300 else "client_error",
        status=status,
        prompt_tokens=facts.prompt_tokens if facts.prompt_tokens is not None else prompt,
        output_tokens=facts.output_tokens or 0,
        ttft_s=None,
        tpot_s=None,
        e2e_s=time.perf_counter() - opened.started_s,
        cached_tokens=facts.cached_tokens,
        response_id=described.upstream_id,
        response_model=described.model,
        finish_reasons=described.finish_reasons,
    )

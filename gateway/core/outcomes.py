"""What each upstream attempt's end does to state: leases, health, statistics, SLO accounting.

Synchronous, with `now` passed in: store writes go to a `spawn` (background tasks live, run at
once offline over a store that never suspends), so the live finisher (gateway/server/finisher.py)
and the offline simulator account for attempts with this same code, and a slow store never
delays a response.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from gateway.core.progress import StreamProgress, Stretch
from gateway.core.rate_limits import parse_rate_limits
from gateway.core.slo import missed_target
from gateway.errors import AttemptFailed
from gateway.state.background import Spawn
from gateway.state.store import LatencySample, SampleKind, StatsStore
from gateway.state.view import SharedView
from gateway.telemetry.record import Finished
from gateway.watch.endpoints import Registry
from gateway.watch.health import Breakers
from policies.base import Prediction, RouteRequest
from policies.estimate import answer_parts


class Leases(Protocol):
    """This replica's leases: `LeaseBook` live, `LocalLeases` plus inline store calls offline."""

    def take(
        self,
        endpoint_id: str,
        request_id: str,
        tokens: int,
        prefill: int = 0,
        predicted: Prediction | None = None,
    ) -> object: ...

    def first_token(self, endpoint_id: str, request_id: str) -> object: ...

    def drop(self, endpoint_id: str, request_id: str) -> object: ...

    def in_flight_when_taken(self, endpoint_id: str, request_id: str) -> int: ...

    def predicted(self, endpoint_id: str, request_id: str) -> Prediction | None: ...


class Outcomes:
    """What each attempt's end does to state: leases, cool-downs, breakers, statistics.

    Synchronous, with `now` passed in; store writes go to `spawn` (background tasks live, run at
    once offline over a store that never suspends), so the live `Finisher` and the offline
    simulator account for attempts with this same code.
    """

    def __init__(
        self,
        leases: Leases,
        registry: Registry,
        breakers: Breakers,
        view: SharedView,
        spawn: Spawn,
        *,
        observe: Spawn | None = None,
    ) -> None:
        """`observe`: where observations go, when not to `spawn` (see `Finisher`)."""
        self.leases = leases
        self.registry = registry
        self.breakers = breakers
        self.view = view
        self.store: StatsStore = view.store
        self.spawn = spawn
        self.observe = observe or spawn

    def started(
        self,
        endpoint_id: str,
        request: RouteRequest,
        tokens: int,
        predicted: Prediction | None = None,
    ) -> None:
        """An attempt is sent: its lease, with its KV footprint `tokens`, its uncached prompt
        tokens (prefill ahead of later requests until its first token) and the policy's
        prediction for it there, which its outcome is observed against."""
        uncached = _uncached(request, endpoint_id)
        self.leases.take(endpoint_id, request.request_id, tokens, uncached, predicted)

    def failed_attempt(
        self, endpoint_id: str, request: RouteRequest, failure: AttemptFailed, now: float
    ) -> None:
        """An attempt that got no usable answer before the first byte."""
        self.leases.drop(endpoint_id, request.request_id)
        if failure.quota_exhausted and failure.retry_after_s:
            self.cool_down(endpoint_id, now + failure.retry_after_s, "insufficient_quota", now)
        elif failure.retry_after_s:
            self.cool_down(endpoint_id, now + failure.retry_after_s, "retry_after", now)
        if failure.status != 429:  # rate limits cool an endpoint down; they do not break it
            self._record_health(endpoint_id, ok=False, now=now)
        sample = LatencySample(
            now, False, failure.status, request.prompt_tokens, 0, None, None, 0.0
        )
        self.observe(self.store.observe(endpoint_id, sample))

    def streamed(
        self,
        endpoint_id: str,
        request: RouteRequest,
        progress: StreamProgress,
        tokens: int,
        ttft_s: float | None,
        last_s: float,
        now: float,
    ) -> None:
        """A running stream has `tokens` so far, the last at `last_s` (the progress's clock):
        its first token, then its stretches, go to the statistics as they come."""
        if not progress.started:
            if ttft_s is None:
                return
            progress.start(tokens, last_s)
            self.leases.first_token(endpoint_id, request.request_id)
            self._observe_part(endpoint_id, request, "first_token", now, ttft_s=ttft_s)
        elif (stretch := progress.stretch(tokens, last_s)) is not None:
            self._observe_part(endpoint_id, request, "progress", now, stretch=stretch)

    def _observe_part(
        self,
        endpoint_id: str,
        request: RouteRequest,
        kind: SampleKind,
        now: float,
        *,
        ttft_s: float | None = None,
        stretch: Stretch | None = None,
    ) -> None:
        # the load now, not when the lease was taken: a stretch's TPOT is the load's during it
        in_flight = self.view.in_flight(endpoint_id, self.view.shared(endpoint_id))
        tpot_s, tokens = stretch if stretch is not None else (None, 0)
        predicted = self.leases.predicted(endpoint_id, request.request_id) if ttft_s else None
        sample = LatencySample(
            now, True, 200, _uncached(request, endpoint_id), tokens, ttft_s, tpot_s, 0.0,
            in_flight, kind, predicted.ttft_mean_s if predicted else None,
        )  # fmt: skip
        self.observe(self.store.observe(endpoint_id, sample))

    def finished(
        self,
        endpoint_id: str,
        request: RouteRequest,
        result: Finished,
        limit_headers: Mapping[str, str] | None,
        now: float,
        progress: StreamProgress | None = None,
    ) -> str | None:
        """A request that got an answer; `limit_headers`: a provider's rate-limit headers;
        `progress`: its stream's, when its first token was observed already (then only the rest
        is). What missed its SLO ("" when it met it, gateway/core/slo.py); None when the client
        left (which says nothing about either)."""
        in_flight = self.leases.in_flight_when_taken(endpoint_id, request.request_id)
        predicted = self.leases.predicted(endpoint_id, request.request_id)
        self.leases.drop(endpoint_id, request.request_id)
        if result.outcome != "cancelled":
            self._record_health(endpoint_id, ok=result.outcome != "upstream_error", now=now)
        if limit_headers is not None:
            self._honour_rate_limits(endpoint_id, limit_headers, now)
        if result.outcome == "cancelled":
            return None
        parted = progress is not None and progress.started
        if parted and progress is not None and (tail := progress.rest()) is not None:
            self._observe_part(endpoint_id, request, "progress", now, stretch=tail)
        ttft_s, tpot_s = result.ttft_s, result.tpot_s
        if not request.stream and predicted is not None and result.outcome == "ok":
            ttft_s, tpot_s = answer_parts(predicted, result.e2e_s, result.output_tokens)
        sample = LatencySample(
            at_s=now,
            ok=result.outcome != "upstream_error",
            status=result.status,
            # the fit learns TTFT per computed prompt token: cache hits are not computed, and
            # counting them would bias its slope low (policies/estimate.py)
            prompt_tokens=result.prompt_tokens - (result.cached_tokens or 0),
            output_tokens=result.output_tokens,
            ttft_s=ttft_s,  # a whole answer's: its time split as predicted (answer_parts)
            tpot_s=tpot_s,
            e2e_s=result.e2e_s,
            in_flight=in_flight,
            kind="rest" if parted else "whole",
            ttft_predicted_s=predicted.ttft_mean_s if predicted else None,
            tpot_predicted_s=predicted.tpot_mean_s if predicted else None,
        )
        self.observe(self.store.observe(endpoint_id, sample))
        return missed_target(
            request.slo,
            ok=result.outcome == "ok",
            ttft_s=result.ttft_s,
            tpot_s=result.tpot_s,
            e2e_s=result.e2e_s,
            stream=request.stream,
            output_tokens=result.output_tokens,
        )

    def _record_health(self, endpoint_id: str, *, ok: bool, now: float) -> None:
        if ok and not self.view.stats(endpoint_id).breaker.failures:
            return  # the common case: nothing to reset, so no write to the shared store
        self.spawn(self.breakers.record(endpoint_id, ok=ok, now=now))

    def _honour_rate_limits(self, endpoint_id: str, headers: Mapping[str, str], now: float) -> None:
        """A provider that says its budget is spent is left alone until the budget resets."""
        wait_s = parse_rate_limits(headers, now=now).exhausted_for_s()
        if wait_s:
            self.cool_down(endpoint_id, now + wait_s, "rate_limit_exhausted", now)

    def cool_down(self, endpoint_id: str, until_s: float, reason: str, now: float) -> None:
        self.registry.cool_down(endpoint_id, until_s, reason)
        self.spawn(self.store.cool_down(endpoint_id, until_s=until_s, now=now))


def covered(measured_s: float | None, p95_s: float | None) -> bool | None:
    """Whether an outcome came within the p95 predicted for it (None: either is unknown)."""
    return None if measured_s is None or p95_s is None else measured_s <= p95_s


def _uncached(request: RouteRequest, endpoint_id: str) -> int:
    """The prompt tokens the endpoint computes as far as known mid-stream: the engine reports
    its cached count only with the usage at the end, so a first token is fitted on the prefix
    index's prediction. Fitted on the whole prompt, hits biased the TTFT slope low, and the
    holders of long prefixes looked slow (sessions_slow: 94% -> 76% chat attainment)."""
    cached = request.cached_tokens.get(endpoint_id)
    return (
        request.prompt_tokens if cached is None else max(0, request.prompt_tokens - round(cached))
    )

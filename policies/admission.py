"""Admission decisions: saturation with hysteresis, reserved headroom, shedding, deadline queue.

Pure: snapshots, the previous state and the caller's clock (`now_s`) in, a decision out. The
gateway (`gateway/core/admission_control.py`) keeps each endpoint's previous `Saturation`,
applies tenant limits with the store's atomic counters, holds the `DeadlineQueue`
(policies/deadline_queue.py) and renders rejections.

Pressure of one endpoint (0 = idle, 1 = at a threshold), the largest of
    kv_usage / kv_threshold                                  engine gauges, used only when no
    waiting_for_capacity (else waiting) / queue_threshold    older than max_gauge_age_s
    in_flight / (max_concurrency · in_flight_threshold)      gateway leases, if max_concurrency
    in_flight_tokens / kv_capacity / kv_threshold            this replica's dispatched footprint,
                                                             instant where the KV gauge lags
    preemptions_per_s / preemption_threshold_per_s           a preempting engine is saturated
                                                             (policies/engine_pressure.py)
A request also checks its own footprint (`request_states`): its prompt plus max output tokens
added to the KV in use must stay below the line its class may reach, so a batch request that
would cross into the reserve is refused before it takes the reserve, not after.
Stale or missing gauges are left out (fail open): gateway leases still guard endpoints with a
concurrency limit, and the routing estimate still sees queues through in-flight counts.

Saturation levels (r = reserve_fraction, h = hysteresis_band)
    OPEN       pressure < 1 − r        anyone may use the endpoint
    RESERVED   1 − r ≤ pressure < 1    the reserved top (KV 0.7..0.8 by default): only
                                       non-sheddable classes with priority ≥ reserve_min_priority
    SATURATED  1 ≤ pressure            nobody
A level is entered as soon as pressure reaches it and left downwards only once pressure is
below its entry point − h, so the state does not flap around a threshold. The pool of a
request is saturated when no candidate endpoint has headroom for its class.

Decision for a request (after tenant limits, which the gateway applies)
    sheddable:      Admit when an endpoint is OPEN and nobody waits in the queue; else 429
                    (`reserved_for_higher_priority` when reserved headroom is left, else
                    `saturated`). Sheddable classes never use the reserve.
    non-sheddable:  Admit when an endpoint has headroom for the class; else Queue until
                    now + min(TTFT target (else deadline target), queue_max_wait_s); 503
                    `queue_full` at queue_max_size, 503 `deadline_unreachable` when the predicted
                    TTFT cannot meet that deadline.
So a non-sheddable request is never refused while a sheddable one of the same model would be
admitted: the sheddable one needs an OPEN endpoint and an empty queue, and either admits the
non-sheddable one.

By prediction (`by_prediction`, on the routing policy's ranking of the endpoints the thresholds
leave it, or of all of them when it would queue): the ranking's predictions are the routing
estimate's calibrated p95s (policies/estimate.py: queued prefill and running decode included)
and are judged as the router ranks, by `policies.slo_aware.ratio` (≤ 1 meets the class).
    some endpoint meets it at its optimistic p95 (p95 / u²: at its p95 once warm, u = 1; a
    cold one's prior alone never refuses), slo_aware's meets and unproven tiers
                    Admit (the ranking puts those first: another endpoint than the loaded one
                    is a spill); a request that would queue waits, as above
    none meets it at its p95, but one at its predicted mean
                    Admit, at risk (slo_aware's `slo_at_risk`): more likely met than not.
                    Refusing these too cost more than it freed, offline, where they mostly
                    met their targets (docs/slo-guide.md, section 6c)
    none meets it even at its mean, but one is idle (nothing in flight or queued) and its
    prior meets it
                    Explore there: its statistics, measured under a past load perhaps, only
                    change once it serves again
    none meets it even at its mean, but one would when idle (the same prediction with
    nothing in flight, at its p95)
                    Reject at once, by load: 429 sheddable, 503 otherwise, `overloaded`, with
                    Retry-After = the least excess of a binding p95 over its target, in whole
                    seconds (≥ 1): the queued work that must drain first. Never a wait that the
                    prediction says cannot succeed. A deadline class is judged by its deadline
                    (the prediction of its whole answer), so it queues while that can be met.
                    The gateway spares a request the load is others' (and refuses theirs): a
                    non-sheddable one while sheddable requests of its model are in flight
                    (sheddable ones are then refused for a second, as while one waits in the
                    queue), or one whose fairness key is served less than every other key
                    active in its class (policies/fair_share.py).
    none meets it even idle (its own size: a prompt whose prefill alone exceeds the target),
    that is on no endpoint with nothing in flight, neither by its measured statistics (p95)
    nor by its prior alone (optimistic p95 = p95 / u²): a fit measured under load holds that
    load's queueing, so alone it would call load size
                    BestEffort: served on the ranking as it is and flagged (`best_effort`);
                    a class with `when_unmeetable: reject` refuses it at once (`unmeetable`)
A policy that predicts nothing (least_loaded, ...) leaves the thresholds alone to decide.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from functools import cached_property
from typing import Any, Literal, NamedTuple, Self

from pydantic import BaseModel, ConfigDict, Field

from policies.base import EndpointSnapshot, LatencyEstimate, Prediction, Ranking, SloTarget
from policies.deadline_queue import can_still_meet
from policies.slo_aware import binding, ratio


class Reason(StrEnum):
    """Why a request was refused: the `x-slo-gateway-reason` header and the error code."""

    TENANT_RATE_LIMITED = "tenant_rate_limited"
    TENANT_TOKEN_LIMITED = "tenant_token_limited"
    TENANT_CONCURRENCY_LIMITED = "tenant_concurrency_limited"
    TENANT_BUDGET_EXCEEDED = "tenant_budget_exceeded"
    SATURATED = "saturated"
    RESERVED_FOR_HIGHER_PRIORITY = "reserved_for_higher_priority"
    DEADLINE_UNREACHABLE = "deadline_unreachable"
    QUEUE_FULL = "queue_full"
    OVERLOADED = "overloaded"  # no endpoint's p95 meets the target now, by load
    UNMEETABLE = "unmeetable"  # none would meet it idle either, and the class says reject


class Limits(NamedTuple):
    """The thresholds `_states` and `_saturation` read, as plain values: a pydantic attribute
    costs about four times a tuple field, and these run per endpoint per request."""

    in_flight_threshold: float
    max_gauge_age_s: float
    kv_threshold: float
    queue_threshold: float
    hysteresis_band: float
    reserved_at: float  # 1 − reserve_fraction
    preemption_threshold_per_s: float


class AdmissionParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kv_threshold: float = Field(default=0.8, gt=0, le=1, description="KV usage, 0..1")
    queue_threshold: float = Field(default=5.0, gt=0, description="engine waiting requests")
    in_flight_threshold: float = Field(default=1.0, gt=0, description="of max_concurrency")
    max_gauge_age_s: float = Field(default=10.0, gt=0)
    preemption_threshold_per_s: float = Field(
        default=0.5, gt=0, description="engine preemptions per second that saturate it"
    )
    hysteresis_band: float = Field(default=0.1, ge=0, lt=1, description="of a threshold")
    reserve_fraction: float = Field(default=0.125, ge=0, lt=1, description="of a threshold")
    reserve_min_priority: int = 1
    queue_max_size: int = Field(default=256, ge=0)
    queue_max_wait_s: float = Field(default=10.0, gt=0)
    retry_after_s: float = Field(default=1.0, ge=0)
    default_output_tokens: int = Field(
        default=256, ge=1, description="footprint without max_tokens"
    )
    fair_share: bool = Field(
        default=True,
        description="waiting requests of a class go least-served fairness key first "
        "(policies/fair_share.py); off: first come, first served",
    )

    @cached_property
    def limits(self) -> Limits:
        """The thresholds as plain values, worked out once per (frozen) params object."""
        return Limits(
            self.in_flight_threshold,
            self.max_gauge_age_s,
            self.kv_threshold,
            self.queue_threshold,
            self.hysteresis_band,
            1 - self.reserve_fraction,
            self.preemption_threshold_per_s,
        )

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy with `update` applied; its `limits` are worked out anew (pydantic copies the
        cached value along with the fields, which `update` may change)."""
        copied = super().model_copy(update=update, deep=deep)
        copied.__dict__.pop("limits", None)
        return copied


class Saturation(IntEnum):
    OPEN = 0
    RESERVED = 1
    SATURATED = 2


@dataclass(frozen=True, slots=True)
class Admit:
    pass


@dataclass(frozen=True, slots=True)
class Reject:
    status: Literal[429, 503]
    reason: Reason
    retry_after_s: float


@dataclass(frozen=True, slots=True)
class Queue:
    deadline_s: float  # absolute, on the clock of the `now_s` passed to `decide`


@dataclass(frozen=True, slots=True)
class BestEffort:
    """Admitted although no endpoint can meet the target, even idle: served on the best
    prediction, and flagged."""


@dataclass(frozen=True, slots=True)
class Explore:
    """Admitted to the idle endpoint at `index` of the ranking, whose statistics (measured
    under a past load, perhaps) only serving it can bring up to date."""

    index: int


Decision = Admit | Reject | Queue
UNMEASURED = LatencyEstimate()  # no statistics: an estimate falls back on the prior
Verdict = Admit | BestEffort | Explore | Reject  # `by_prediction`'s, on a ranking
ADMIT = Admit()
BEST_EFFORT = BestEffort()


def pressure(
    snapshot: EndpointSnapshot, params: AdmissionParams, footprint_tokens: int = 0
) -> float:
    """How close the endpoint is to a saturation threshold: 1.0 = at one. With a footprint,
    the pressure the endpoint would be under once that many more KV tokens are in use."""
    levels: dict[str, float] = {}
    _states({}, (snapshot,), params.limits, footprint_tokens, levels)
    return levels[snapshot.endpoint_id]


def request_states(
    states: Mapping[str, Saturation],
    snapshots: Iterable[EndpointSnapshot],
    footprint_tokens: int,
    params: AdmissionParams,
) -> dict[str, Saturation]:
    """Each endpoint's state as this request would find it once admitted (never lower)."""
    found: dict[str, Saturation] = {}
    _states({}, snapshots, params.limits, footprint_tokens, request=found)
    return {key: max(states.get(key, _OPEN), state) for key, state in found.items()}


def admission_states(
    previous: Mapping[str, Saturation],
    snapshots: Iterable[EndpointSnapshot],
    footprint_tokens: int,
    params: AdmissionParams,
) -> tuple[dict[str, Saturation], dict[str, Saturation]]:
    """`next_saturations`, and `request_states` over them, in one pass over the snapshots (a
    request's admission needs both, and the pressure is the same work in each): (each
    endpoint's next state, the state this request would find it in once admitted)."""
    found: dict[str, Saturation] = {}
    return _states(previous, snapshots, params.limits, footprint_tokens, request=found), found


# Enum attribute lookups cost about 0.1 µs each; these run per endpoint per request.
_OPEN, _RESERVED, _SATURATED = Saturation.OPEN, Saturation.RESERVED, Saturation.SATURATED


def next_saturation(
    previous: Saturation, snapshot: EndpointSnapshot, params: AdmissionParams
) -> Saturation:
    key = snapshot.endpoint_id
    return _states({key: previous}, (snapshot,), params.limits, 0)[key]


def next_saturations(
    previous: Mapping[str, Saturation],
    snapshots: Iterable[EndpointSnapshot],
    params: AdmissionParams,
) -> dict[str, Saturation]:
    """`next_saturation` for a pool, by endpoint id; an endpoint not seen before starts OPEN."""
    return _states(previous, snapshots, params.limits, 0)


def _states(
    previous: Mapping[str, Saturation],
    snapshots: Iterable[EndpointSnapshot],
    limits: Limits,
    footprint_tokens: int = 0,
    levels: dict[str, float] | None = None,
    request: dict[str, Saturation] | None = None,
) -> dict[str, Saturation]:
    """Each endpoint's next state from its pressure (the module's docstring), by hysteresis from
    `previous`. Into `request` when given: the state a request of `footprint_tokens` would find
    it in once admitted (the pressure with that footprint added to the KV in use, from OPEN,
    never below the next state); into `levels`: that pressure. One loop, the thresholds read
    once and `x if x > y else y` for max(): it runs per endpoint per request, and calls cost
    twice its time here."""
    (in_flight_threshold, max_age_s, kv_threshold, queue_threshold, band, reserved_at,
     preemption_threshold_per_s) = limits  # fmt: skip
    open_below = reserved_at - band  # OPEN whatever it was before: most endpoints
    states = {}
    for snapshot in snapshots:
        level = added = 0.0  # added: the KV level with the request's footprint
        if snapshot.max_concurrency:
            level = snapshot.in_flight / (snapshot.max_concurrency * in_flight_threshold)
        engine = snapshot.engine
        # stale or missing gauges are left out (fail open)
        if engine is not None and (age_s := engine.age_s) is not None and not age_s > max_age_s:
            kv_usage = engine.kv_usage
            if kv_usage is not None:
                # KV in use: the gauge, or our own dispatched footprint when it is larger (the
                # gauge lags); with the footprint of the request being decided, for `request`
                capacity = engine.kv_capacity_tokens
                if capacity:
                    ours = snapshot.in_flight_tokens / capacity
                    kv_usage = kv_usage if kv_usage > ours else ours
                    added = (kv_usage + footprint_tokens / capacity) / kv_threshold
                kv_level = kv_usage / kv_threshold
                level = kv_level if kv_level > level else level
            waiting = engine.waiting_for_capacity  # when reported (policies/engine_pressure.py)
            waiting = engine.waiting if waiting is None else waiting
            if waiting is not None:
                queue_level = waiting / queue_threshold
                level = queue_level if queue_level > level else level
            preempting = engine.preemptions_per_s
            if preempting:
                preemption_level = preempting / preemption_threshold_per_s
                level = preemption_level if preemption_level > level else level
        key = snapshot.endpoint_id
        state = (
            _OPEN if level < open_below else _saturation(previous.get(key, _OPEN), level, limits)
        )
        states[key] = state
        loaded = added if added > level else level  # the pressure once the request is in
        if request is not None:
            alone = _OPEN if loaded < open_below else _saturation(_OPEN, loaded, limits)
            request[key] = alone if alone > state else state
        if levels is not None:
            levels[key] = loaded
    return states


def saturation_for(previous: Saturation, level: float, params: AdmissionParams) -> Saturation:
    return _saturation(previous, level, params.limits)


def _saturation(previous: Saturation, level: float, limits: Limits) -> Saturation:
    if level < limits.reserved_at - limits.hysteresis_band:  # the common case first
        return _OPEN
    if level >= 1 or (previous == _SATURATED and level >= 1 - limits.hysteresis_band):
        return _SATURATED
    reserved_at = limits.reserved_at
    if level >= reserved_at:
        return _RESERVED
    if previous != _OPEN and level >= reserved_at - limits.hysteresis_band:
        return _RESERVED
    return _OPEN


def ceiling(slo: SloTarget, params: AdmissionParams) -> Saturation:
    """The most loaded state this class may still be sent to."""
    if not slo.sheddable and slo.priority >= params.reserve_min_priority:
        return _RESERVED
    return _OPEN


def has_headroom(state: Saturation, slo: SloTarget, params: AdmissionParams) -> bool:
    return state <= ceiling(slo, params)


def with_headroom(
    candidates: Sequence[EndpointSnapshot],
    states: Mapping[str, Saturation],
    slo: SloTarget,
    params: AdmissionParams,
) -> list[EndpointSnapshot]:
    """The candidates this class may be sent to now (unknown endpoints count as OPEN)."""
    highest = ceiling(slo, params)
    return [c for c in candidates if states.get(c.endpoint_id, _OPEN) <= highest]


def decide(
    slo: SloTarget,
    states: Iterable[Saturation],
    params: AdmissionParams,
    *,
    now_s: float,
    queued: int = 0,
    predicted_ttft_s: float | None = None,
) -> Decision:
    """Admit, reject or queue one request, given its pool's endpoint states.

    `queued`: requests of the same model waiting in the deadline queue now.
    `predicted_ttft_s`: the best predicted TTFT once dispatched (None: not checked).
    """
    best = min(states, default=_SATURATED)
    if slo.sheddable:
        if best == _OPEN and queued == 0:
            return ADMIT
        reason = Reason.RESERVED_FOR_HIGHER_PRIORITY if best == _RESERVED else Reason.SATURATED
        return Reject(429, reason, params.retry_after_s)
    if best <= ceiling(slo, params):
        return ADMIT
    if queued >= params.queue_max_size:
        return Reject(503, Reason.QUEUE_FULL, params.retry_after_s)
    deadline_s = now_s + queue_budget_s(slo, params)
    if predicted_ttft_s is not None and not can_still_meet(now_s, deadline_s, predicted_ttft_s):
        return Reject(503, Reason.DEADLINE_UNREACHABLE, params.retry_after_s)
    return Queue(deadline_s)


def queue_budget_s(slo: SloTarget, params: AdmissionParams) -> float:
    """How long a request of this class may wait: its TTFT target, capped by the queue's."""
    target_s = slo.ttft_s if slo.ttft_s is not None else slo.deadline_s
    return min(target_s if target_s is not None else math.inf, params.queue_max_wait_s)


def by_prediction(
    slo: SloTarget,
    stream: bool,
    ranking: Ranking,
    idle: Callable[[], Sequence[tuple[Prediction, Prediction]]],
) -> Verdict:
    """Admit, serve best effort or refuse one ranked request by the routing prediction (the
    module's docstring, "By prediction"). `ranking`: the endpoints and their predictions (none:
    the policy predicts nothing, so admitted); `idle()`: for each of its endpoints, the
    request's predictions there with nothing in flight (as measured, by the prior alone),
    asked for only when none meets; none: unknown, so a miss counts as load."""
    predictions = ranking.predictions
    if not predictions or any(_may_meet(slo, p, stream) for p in predictions):
        return ADMIT
    unloaded = idle()
    for index, (snapshot, (_, prior)) in enumerate(zip(ranking.endpoints, unloaded, strict=False)):
        idle_now = not snapshot.in_flight and predictions[index].queued < 0.5
        if idle_now and _within_optimistic(slo, prior, stream):
            return Explore(index)
    if unloaded and not any(
        _within_optimistic(slo, measured, stream) or _within_optimistic(slo, prior, stream)
        for measured, prior in unloaded
    ):
        if slo.when_unmeetable == "reject":
            return Reject(429 if slo.sheddable else 503, Reason.UNMEETABLE, UNMEETABLE_RETRY_S)
        return BEST_EFFORT
    status: Literal[429, 503] = 429 if slo.sheddable else 503
    return Reject(status, Reason.OVERLOADED, drain_s(slo, stream, predictions))


UNMEETABLE_RETRY_S = 60.0  # the same request will not meet its target sooner: not soon


def _may_meet(slo: SloTarget, prediction: Prediction, stream: bool) -> bool:
    """Meets at its optimistic p95, or at its mean (at risk, more likely met than not)."""
    if _within_optimistic(slo, prediction, stream):
        return True
    mean = prediction._replace(ttft_p95_s=prediction.ttft_mean_s, tpot_p95_s=prediction.tpot_mean_s)
    return ratio(slo, mean, stream) <= 1.0


def _within_optimistic(slo: SloTarget, prediction: Prediction, stream: bool) -> bool:
    """Meets at its optimistic p95 (p95 / u²; warm, u = 1: at its p95): slo_aware's meets
    and unproven tiers, which it ranks first."""
    uncertainty = prediction.uncertainty
    return ratio(slo, prediction, stream) <= uncertainty * uncertainty


def drain_s(slo: SloTarget, stream: bool, predictions: Sequence[Prediction]) -> float:
    """Whole seconds, at least 1, until the best endpoint would meet the target: by how much
    its binding p95 exceeds the target (the queued work ahead that must drain first)."""
    excess_s = math.inf
    for prediction in predictions:
        _, p95_s, target_s = binding(slo, prediction, stream)
        if p95_s is not None and target_s is not None:
            excess_s = min(excess_s, p95_s - target_s)
    return float(max(1, math.ceil(excess_s))) if excess_s < math.inf else 1.0


def idle(snapshot: EndpointSnapshot) -> tuple[EndpointSnapshot, EndpointSnapshot]:
    """The endpoint with nothing in flight and no engine load, as measured and as its prior
    alone has it: what a request's own size costs there. Both, since a fit measured under
    load holds that load's queueing (its base and calibration grow with it), and a prior
    alone is only a guess about this endpoint."""
    unloaded = snapshot._replace(in_flight=0, in_flight_tokens=0, prefill_tokens=0, engine=None)
    return unloaded, unloaded._replace(latency=UNMEASURED)

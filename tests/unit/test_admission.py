"""Admission decisions from fixed snapshots and states: saturation, reserve, shedding, queue."""

from __future__ import annotations

import itertools

import pytest

from policies.admission import (
    ADMIT,
    AdmissionParams,
    Admit,
    Decision,
    Queue,
    Reason,
    Reject,
    Saturation,
    decide,
    next_saturation,
    next_saturations,
    pressure,
    request_states,
    saturation_for,
    with_headroom,
)
from policies.base import EndpointSnapshot, EngineSignals, SloTarget
from policies.deadline_queue import DeadlineQueue

PARAMS = AdmissionParams()  # KV 0.8, queue 5, reserve above 7/8 of a threshold, band 0.1
OPEN, RESERVED, FULL = Saturation.OPEN, Saturation.RESERVED, Saturation.SATURATED
INTERACTIVE = SloTarget("interactive", ttft_s=0.5, priority=10)
STANDARD = SloTarget("standard", ttft_s=2.0, priority=0)
REPORT = SloTarget("report", deadline_s=30.0, priority=5)
BATCH = SloTarget("batch", priority=0, sheddable=True)
URGENT_BATCH = SloTarget("urgent-batch", priority=50, sheddable=True)
NOW_S = 1000.0


def replica(
    kv: float | None = None,
    waiting: float | None = None,
    age_s: float = 0.5,
    *,
    capacity_waiting: float | None = None,
    in_flight: int = 0,
    max_concurrency: int | None = None,
) -> EndpointSnapshot:
    engine = EngineSignals(
        waiting=waiting, kv_usage=kv, waiting_for_capacity=capacity_waiting, age_s=age_s
    )
    return EndpointSnapshot(
        "e", "vllm", in_flight=in_flight, max_concurrency=max_concurrency, engine=engine
    )


@pytest.mark.parametrize(
    ("snapshot", "expected"),
    [
        (replica(kv=0.4, waiting=0), 0.5),
        (replica(kv=0.4, waiting=10), 2.0),
        (replica(kv=0.88, waiting=1), 1.1),
        # engine gauges prefer the requests waiting for capacity when reported
        (replica(waiting=10, capacity_waiting=1), 0.2),
        # stale gauges are left out (fail open)
        (replica(kv=0.99, waiting=50, age_s=60.0), 0.0),
        # gateway leases against a concurrency limit count whatever the gauges say
        (replica(kv=0.1, in_flight=8, max_concurrency=8), 1.0),
        (replica(kv=0.1, in_flight=8, age_s=60.0, max_concurrency=16), 0.5),
        (EndpointSnapshot("h", "openai", in_flight=100), 0.0),
    ],
)
def test_pressure_is_the_highest_signal_over_its_threshold(
    snapshot: EndpointSnapshot, expected: float
) -> None:
    assert pressure(snapshot, PARAMS) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("previous", "level", "expected"),
    [
        (OPEN, 0.5, OPEN),
        (OPEN, 0.86, OPEN),  # below the reserve line, 0.875
        (OPEN, 0.875, RESERVED),  # entered at the line
        (OPEN, 1.0, FULL),  # entered at the threshold
        (RESERVED, 0.80, RESERVED),  # still above 0.875 − 0.1
        (RESERVED, 0.77, OPEN),
        (FULL, 0.95, FULL),  # still above 1 − 0.1
        (FULL, 0.89, RESERVED),
        (FULL, 0.70, OPEN),
        (RESERVED, 1.2, FULL),
    ],
)
def test_saturation_has_hysteresis(
    previous: Saturation, level: float, expected: Saturation
) -> None:
    assert saturation_for(previous, level, PARAMS) is expected


def count_changes(params: AdmissionParams, kv_series: list[float]) -> int:
    state, changes = OPEN, 0
    for kv in kv_series:
        new = next_saturation(state, replica(kv=kv, waiting=0), params)
        changes += new is not state
        state = new
    return changes


def test_hysteresis_stops_flapping_around_the_threshold() -> None:
    noisy_kv = [0.8 + 0.02 * (-1) ** i for i in range(40)]  # 0.82, 0.78, 0.82, ...
    assert count_changes(PARAMS, noisy_kv) == 1
    assert count_changes(PARAMS.model_copy(update={"hysteresis_band": 0.0}), noisy_kv) == 40


def test_pool_states_carry_over_by_endpoint_id() -> None:
    hot = replica(kv=0.85, waiting=0)._replace(endpoint_id="hot")  # pressure 1.06
    cooling = replica(kv=0.75, waiting=0)._replace(endpoint_id="cooling")  # 0.94: within band
    fresh = replica(kv=0.75, waiting=0)._replace(endpoint_id="fresh")  # never seen: from OPEN
    states = next_saturations({"cooling": FULL, "gone": FULL}, [hot, cooling, fresh], PARAMS)
    assert states == {"hot": FULL, "cooling": FULL, "fresh": RESERVED}


def test_reason_strings_are_the_documented_header_values() -> None:
    assert {r.value for r in Reason} == {
        "tenant_rate_limited",
        "tenant_token_limited",
        "tenant_budget_exceeded",
        "tenant_concurrency_limited",
        "saturated",
        "reserved_for_higher_priority",
        "deadline_unreachable",
        "queue_full",
        "overloaded",
        "unmeetable",
    }
    assert f"{Reason.QUEUE_FULL}" == "queue_full"


@pytest.mark.parametrize(
    ("slo", "expected"),
    [(INTERACTIVE, ["open", "reserved"]), (STANDARD, ["open"]), (URGENT_BATCH, ["open"])],
)
def test_reserved_headroom_is_kept_for_high_priority_non_sheddable_classes(
    slo: SloTarget, expected: list[str]
) -> None:
    candidates = [EndpointSnapshot(name, "vllm") for name in ("open", "reserved", "full")]
    states = {"open": OPEN, "reserved": RESERVED, "full": FULL}
    chosen = with_headroom(candidates, states, slo, PARAMS)
    assert [c.endpoint_id for c in chosen] == expected


@pytest.mark.parametrize(
    ("slo", "states", "queued", "predicted_ttft_s", "expected"),
    [
        (INTERACTIVE, [FULL, OPEN], 0, None, ADMIT),
        (INTERACTIVE, [RESERVED], 0, None, ADMIT),
        (INTERACTIVE, [FULL], 0, None, Queue(NOW_S + 0.5)),
        (INTERACTIVE, [FULL], 0, 0.3, Queue(NOW_S + 0.5)),
        (INTERACTIVE, [FULL], 0, 0.6, Reject(503, Reason.DEADLINE_UNREACHABLE, 1.0)),
        (INTERACTIVE, [FULL], 256, None, Reject(503, Reason.QUEUE_FULL, 1.0)),
        (INTERACTIVE, [], 0, None, Queue(NOW_S + 0.5)),
        (STANDARD, [RESERVED, FULL], 0, None, Queue(NOW_S + 2.0)),
        (REPORT, [FULL], 0, None, Queue(NOW_S + 10.0)),  # capped by queue_max_wait_s
        (BATCH, [OPEN], 0, None, ADMIT),
        (BATCH, [RESERVED, FULL], 0, None, Reject(429, Reason.RESERVED_FOR_HIGHER_PRIORITY, 1.0)),
        (BATCH, [FULL, FULL], 0, None, Reject(429, Reason.SATURATED, 1.0)),
        (BATCH, [OPEN], 3, None, Reject(429, Reason.SATURATED, 1.0)),  # queued requests go first
        (URGENT_BATCH, [RESERVED], 0, None, Reject(429, Reason.RESERVED_FOR_HIGHER_PRIORITY, 1.0)),
        (BATCH, [], 0, None, Reject(429, Reason.SATURATED, 1.0)),
    ],
)
def test_decision(
    slo: SloTarget,
    states: list[Saturation],
    queued: int,
    predicted_ttft_s: float | None,
    expected: Decision,
) -> None:
    decision = decide(
        slo, states, PARAMS, now_s=NOW_S, queued=queued, predicted_ttft_s=predicted_ttft_s
    )
    assert decision == expected


def test_non_sheddable_is_never_refused_while_a_sheddable_one_would_be_admitted() -> None:
    classes = [INTERACTIVE, STANDARD, REPORT, BATCH, URGENT_BATCH]
    for size in range(4):
        for states in itertools.product(Saturation, repeat=size):
            for queued in (0, 1, PARAMS.queue_max_size):
                decisions = {
                    slo: decide(slo, states, PARAMS, now_s=NOW_S, queued=queued, predicted_ttft_s=9)
                    for slo in classes
                }
                shed = [d for slo, d in decisions.items() if slo.sheddable]
                kept = [d for slo, d in decisions.items() if not slo.sheddable]
                if any(isinstance(d, Admit) for d in shed):
                    assert all(isinstance(d, Admit) for d in kept)


class TestDeadlineQueue:
    def test_pops_earliest_deadline_first_ties_in_arrival_order(self) -> None:
        queue: DeadlineQueue[str] = DeadlineQueue(max_size=10)
        for item, deadline_s in [("late", 9.0), ("early", 2.0), ("tie-1", 5.0), ("tie-2", 5.0)]:
            assert queue.push(item, deadline_s)
        popped = [queue.pop(now_s=0.0) for _ in range(5)]
        assert [p.item if p else None for p in popped] == ["early", "tie-1", "tie-2", "late", None]

    def test_is_bounded(self) -> None:
        queue: DeadlineQueue[int] = DeadlineQueue(max_size=2)
        assert queue.push(1, 5.0) and queue.push(2, 6.0)
        assert queue.full
        assert not queue.push(3, 1.0)
        assert len(queue) == 2

    def test_drops_requests_that_can_no_longer_meet_their_deadline_early(self) -> None:
        queue: DeadlineQueue[str] = DeadlineQueue(max_size=10)
        queue.push("needs-2s", deadline_s=10.0, service_s=2.0)
        queue.push("needs-0s", deadline_s=10.0)
        queue.push("later", deadline_s=20.0, service_s=2.0)
        assert queue.next_expiry_s() == 8.0
        assert queue.drop_expired(now_s=7.9) == []
        assert queue.drop_expired(now_s=8.5) == ["needs-2s"]  # before its deadline, not at it
        assert queue.drop_expired(now_s=10.5) == ["needs-0s"]
        assert len(queue) == 1

    def test_pop_skips_what_does_not_fit_or_cannot_make_it(self) -> None:
        queue: DeadlineQueue[str] = DeadlineQueue(max_size=10)
        queue.push("doomed", deadline_s=1.0, service_s=5.0)
        queue.push("batch", deadline_s=2.0)
        queue.push("interactive", deadline_s=3.0)
        popped = queue.pop(now_s=0.0, fits=lambda item: item == "interactive")
        assert popped is not None and popped.item == "interactive"
        assert (popped := queue.pop(now_s=0.0)) is not None and popped.item == "batch"
        assert queue.pop(now_s=0.0) is None
        assert queue.drop_expired(now_s=0.0) == ["doomed"]

    def test_remove_forgets_a_request_whose_client_left(self) -> None:
        queue: DeadlineQueue[object] = DeadlineQueue(max_size=10)
        first, second = object(), object()
        queue.push(first, 1.0)
        queue.push(second, 2.0)
        assert queue.remove(first)
        assert not queue.remove(first)
        assert (popped := queue.pop(now_s=0.0)) is not None and popped.item is second


def kv_endpoint(kv_usage: float, in_flight_tokens: int = 0) -> EndpointSnapshot:
    signals = EngineSignals(kv_usage=kv_usage, kv_capacity_tokens=10_000, age_s=0.1)
    return EndpointSnapshot("e", "vllm", engine=signals, in_flight_tokens=in_flight_tokens)


@pytest.mark.parametrize(
    ("kv_usage", "in_flight_tokens", "footprint", "expected"),
    [
        (0.50, 0, 1_000, Saturation.OPEN),  # 0.60 after: below the reserve line (0.70)
        (0.65, 0, 1_000, Saturation.RESERVED),  # 0.75 after: it would take the reserve
        (0.75, 0, 1_000, Saturation.SATURATED),  # 0.85 after: past the KV threshold
        (0.10, 7_500, 1_000, Saturation.SATURATED),  # our own dispatches, not yet in the gauge
        (0.65, 0, 0, Saturation.OPEN),  # without a footprint, the endpoint's own state
    ],
)
def test_request_states_count_the_requests_own_kv_footprint(
    kv_usage: float, in_flight_tokens: int, footprint: int, expected: Saturation
) -> None:
    params = AdmissionParams()
    snapshot = kv_endpoint(kv_usage, in_flight_tokens)
    states = request_states({"e": Saturation.OPEN}, [snapshot], footprint, params)
    assert states["e"] == expected


def test_a_batch_request_that_would_cross_into_the_reserve_is_shed() -> None:
    params = AdmissionParams()
    batch = SloTarget("batch", deadline_s=60, priority=0, sheddable=True)
    interactive = SloTarget("interactive", ttft_s=0.5, priority=10)
    snapshot = kv_endpoint(0.65)
    big = request_states({}, [snapshot], 1_000, params)
    small = request_states({}, [snapshot], 100, params)
    assert isinstance(decide(batch, big.values(), params, now_s=0.0), Reject)
    assert decide(interactive, small.values(), params, now_s=0.0) == ADMIT


def test_limits_are_worked_out_once_per_params_and_follow_a_copy_with_updates() -> None:
    params = AdmissionParams(kv_threshold=0.6)
    assert params.limits is params.limits
    assert params.limits.kv_threshold == 0.6
    updated = params.model_copy(update={"kv_threshold": 0.9, "reserve_fraction": 0.25})
    assert updated.limits.kv_threshold == 0.9
    assert updated.limits.reserved_at == 0.75
    assert params.limits.kv_threshold == 0.6

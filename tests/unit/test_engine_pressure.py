"""Admission and the estimate read the engine's own pressure: its queue for capacity and its
preemption rate (policies/engine_pressure.py)."""

from __future__ import annotations

from typing import Any

import pytest

from policies.admission import (
    AdmissionParams,
    Queue,
    Reason,
    Reject,
    Saturation,
    decide,
    next_saturation,
    pressure,
)
from policies.base import EndpointSnapshot, EngineSignals, LatencyEstimate, RouteRequest, SloTarget
from policies.engine_pressure import MAX_RECOMPUTE_SHARE, recompute_stretch
from policies.estimate import EstimateParams, Estimator

ADMISSION = AdmissionParams()  # KV 0.8, queue 5, saturated at 0.5 preemptions/s
ESTIMATE = Estimator(EstimateParams())
SERVICE_S = 0.05 + 1e-4 * 1000  # the vLLM prior's prefill of a typical (1,000-token) prompt
INTERACTIVE = SloTarget("interactive", ttft_s=0.5, priority=10)
BATCH = SloTarget("batch", sheddable=True)


def engine(**signals: Any) -> EndpointSnapshot:
    fields: dict[str, Any] = {"running": 0.0, "age_s": 0.0} | signals
    # A statistics object of its own: the estimator keeps each endpoint id's fit by it.
    return EndpointSnapshot("e", "vllm", engine=EngineSignals(**fields), latency=LatencyEstimate())


def predict(snapshot: EndpointSnapshot) -> tuple[float, float]:
    """(queued, ttft_mean_s) of a 1,000-token request."""
    slo = SloTarget("interactive", ttft_s=1.0)
    prediction = ESTIMATE.predict(RouteRequest("r", "m", "t", slo, 1000, 100), snapshot)
    return prediction.queued, prediction.ttft_mean_s


@pytest.mark.parametrize(
    ("preemptions_per_s", "expected"),
    [(0.0, 1.0), (1.0, 1 / 0.85), (100.0, 1 / (1 - MAX_RECOMPUTE_SHARE))],
)
def test_preemptions_stretch_a_queue_by_the_work_they_put_back(
    preemptions_per_s: float, expected: float
) -> None:
    assert recompute_stretch(preemptions_per_s, 0.15) == pytest.approx(expected)


def test_the_estimate_counts_the_queue_for_capacity_not_the_deferred_requests() -> None:
    queued, ttft_s = predict(engine(waiting=10, waiting_for_capacity=2))
    assert queued == 2.0
    assert ttft_s == pytest.approx(SERVICE_S + 2 * SERVICE_S)
    assert predict(engine(waiting=10))[0] == 10.0, "without the reason, every waiting request"


@pytest.mark.parametrize(
    ("signals", "expected_wait_s"),
    [
        ({"waiting": 4, "preemptions_per_s": 1.0}, 4 * SERVICE_S / (1 - 1.0 * SERVICE_S)),
        ({"waiting": 4, "preemptions_per_s": 100.0}, 4 * SERVICE_S / (1 - MAX_RECOMPUTE_SHARE)),
        # one half-life old: half the queue and half the rate are trusted
        ({"waiting": 4, "preemptions_per_s": 1.0, "age_s": 2.0}, 2 * SERVICE_S / (1 - 0.075)),
        ({"waiting": 4, "preemptions_per_s": 0.0}, 4 * SERVICE_S),
        ({"waiting": 4, "preemptions_per_s": None}, 4 * SERVICE_S),
        ({"waiting": 0, "preemptions_per_s": 5.0}, 0.0),
    ],
)
def test_a_preempting_engine_drains_its_queue_slower(
    signals: dict[str, Any], expected_wait_s: float
) -> None:
    _, ttft_s = predict(engine(**signals))
    assert ttft_s == pytest.approx(SERVICE_S + expected_wait_s)


@pytest.mark.parametrize(
    ("signals", "expected"),
    [
        ({"kv_usage": 0.3, "preemptions_per_s": 1.0}, 2.0),
        ({"kv_usage": 0.3, "preemptions_per_s": 0.25}, 0.5),
        ({"kv_usage": 0.4, "preemptions_per_s": 0.0}, 0.5),
        ({"kv_usage": 0.4, "preemptions_per_s": None}, 0.5),
        # stale: left out with the other gauges (fail open)
        ({"kv_usage": 0.3, "preemptions_per_s": 9.0, "age_s": 60.0}, 0.0),
    ],
)
def test_admission_pressure_counts_the_preemption_rate(
    signals: dict[str, Any], expected: float
) -> None:
    assert pressure(engine(**signals), ADMISSION) == pytest.approx(expected)


def test_a_preempting_engine_is_saturated_whatever_its_kv_gauge_says() -> None:
    preempting = engine(kv_usage=0.3, waiting=0, preemptions_per_s=0.5)
    state = next_saturation(Saturation.OPEN, preempting, ADMISSION)
    assert state == Saturation.SATURATED
    assert decide(BATCH, [state], ADMISSION, now_s=0.0) == Reject(429, Reason.SATURATED, 1.0)
    assert isinstance(decide(INTERACTIVE, [state], ADMISSION, now_s=0.0), Queue)
    calm = engine(kv_usage=0.3, waiting=0, preemptions_per_s=0.0)
    assert next_saturation(state, calm, ADMISSION) == Saturation.OPEN, "once the rate is 0"

"""TTFT/TPOT prediction from fixed snapshots: priors, fits, fused load, penalties."""

from __future__ import annotations

from typing import Any

import pytest

from policies.base import (
    EndpointSnapshot,
    EngineSignals,
    LatencyEstimate,
    Prediction,
    RouteRequest,
    SloTarget,
)
from policies.estimate import EndpointPrior, EstimateParams, Estimator, answer_parts

PARAMS = EstimateParams()
ESTIMATE = Estimator(PARAMS)
VLLM = PARAMS.priors.vllm  # a = 0.05 s, b = 1e-4 s/token, tpot 0.02 s, spreads 2.0 / 1.6
WARM = LatencyEstimate(samples=100, ttft_mean_s=0.3, ttft_base_s=0.1, ttft_per_token_s=0.001)


def request(prompt_tokens: int = 1000, max_tokens: int | None = 100) -> RouteRequest:
    slo = SloTarget("interactive", ttft_s=1.0)
    return RouteRequest("r1", "m", "t", slo, prompt_tokens=prompt_tokens, max_tokens=max_tokens)


def endpoint(**fields: Any) -> EndpointSnapshot:
    # Its own statistics object unless given: the estimator keeps each endpoint id's fit until
    # the object changes, and these cases reuse the id "e1" with other kinds and limits.
    return EndpointSnapshot("e1", "vllm", latency=LatencyEstimate())._replace(**fields)


def engine(waiting: float = 0, running: float = 0, age_s: float = 0.0) -> EngineSignals:
    return EngineSignals(waiting=waiting, running=running, age_s=age_s)


@pytest.mark.parametrize(
    ("snapshot", "prompt_tokens", "expected_ttft_s"),
    [
        # cold, idle: the vLLM prior a + b·P
        (endpoint(), 1000, 0.05 + 1e-4 * 1000),
        (endpoint(), 8000, 0.05 + 1e-4 * 8000),
        # warm: the store's fit, a + b·P
        (endpoint(latency=WARM), 1000, 0.1 + 0.001 * 1000),
        (endpoint(latency=WARM), 4000, 0.1 + 0.001 * 4000),
        # half warm: halfway between fit and prior
        (
            endpoint(latency=LatencyEstimate(samples=5, ttft_base_s=0.1, ttft_per_token_s=0.001)),
            1000,
            0.5 * (0.1 + 1.0) + 0.5 * (0.05 + 0.1),
        ),
        # a flat fit (slope 0: equal prompts) keeps the prior slope around the measured mean
        (
            endpoint(
                latency=LatencyEstimate(
                    samples=100,
                    ttft_mean_s=0.3,
                    ttft_base_s=0.3,
                    ttft_per_token_s=0.0,
                    prompt_tokens_mean=500,
                )
            ),
            2500,
            0.3 + 1e-4 * 2000,
        ),
        # fresh engine queue of 4: four mean prompts of prefill ahead
        (endpoint(engine=engine(waiting=4)), 1000, 0.15 + 4 * 0.15),
    ],
)
def test_ttft_mean_follows_prompt_length_and_queue(
    snapshot: EndpointSnapshot, prompt_tokens: int, expected_ttft_s: float
) -> None:
    prediction = ESTIMATE.predict(request(prompt_tokens), snapshot)
    assert prediction.ttft_mean_s == pytest.approx(expected_ttft_s)


HALF_WARM = LatencyEstimate(samples=5, ttft_base_s=0.1, ttft_per_token_s=0.001)


@pytest.mark.parametrize(
    ("snapshot", "expected_extra_s"),
    [
        # cold: this replica's 6,000 tokens sent and not yet answering are prefill ahead
        (endpoint(prefill_tokens=6000), 1e-4 * 6000),
        # half warm: half of it (the fit holds the endpoint's typical queueing)
        (endpoint(prefill_tokens=6000, latency=HALF_WARM), 0.5 * (0.5 * (0.001 + 1e-4)) * 6000),
        # warm: none
        (endpoint(prefill_tokens=6000, latency=WARM), 0.0),
        # fused with the queue's wait, the larger counting: 4 queued x 0.15 s > 0.3 s of prefill
        (endpoint(prefill_tokens=3000, engine=engine(waiting=4)), 0.0),
        (endpoint(prefill_tokens=9000, engine=engine(waiting=4)), 1e-4 * 9000 - 4 * 0.15),
        # a hosted fleet (no batch slots in its prior) does not queue our prefills
        (endpoint(kind="openai", prefill_tokens=6000), 0.0),
    ],
)
def test_a_cold_endpoint_counts_the_prefill_sent_ahead_of_a_request(
    snapshot: EndpointSnapshot, expected_extra_s: float
) -> None:
    idle = ESTIMATE.predict(request(), snapshot._replace(prefill_tokens=0))
    loaded = ESTIMATE.predict(request(), snapshot)
    scale = idle.uncertainty * (2.5 if snapshot.kind == "openai" else 2.0)  # u x the spread
    assert loaded.ttft_mean_s - idle.ttft_mean_s == pytest.approx(expected_extra_s, abs=1e-12)
    assert loaded.ttft_p95_s - idle.ttft_p95_s == pytest.approx(expected_extra_s * scale)


@pytest.mark.parametrize(
    ("snapshot", "expected_queued"),
    [
        (endpoint(), 0.0),
        (endpoint(engine=engine(waiting=8, age_s=0.0)), 8.0),
        # one half-life old: half engine gauge, half gateway view (no leases beyond 128 slots)
        (endpoint(engine=engine(waiting=8, age_s=2.0)), 4.0),
        # very stale gauges: only the gateway's leases beyond the batch slots
        (endpoint(in_flight=140, engine=engine(waiting=0, age_s=60.0)), 12.0),
        # no engine at all: leases beyond max_concurrency wait
        (endpoint(kind="openai", in_flight=10, max_concurrency=4), 6.0),
        # fresh gauges that missed a burst cannot hide leases over the concurrency limit
        (endpoint(in_flight=10, max_concurrency=4, engine=engine(waiting=0)), 6.0),
        # a hosted provider without a limit never queues at the gateway
        (endpoint(kind="openai", in_flight=500), 0.0),
    ],
)
def test_fused_queue_trusts_fresh_gauges_and_instant_leases(
    snapshot: EndpointSnapshot, expected_queued: float
) -> None:
    prediction = ESTIMATE.predict(request(), snapshot)
    assert prediction.queued == pytest.approx(expected_queued, abs=1e-3)


def test_a_long_queue_makes_an_endpoint_slower_than_an_idle_one() -> None:
    idle = ESTIMATE.predict(request(), endpoint(engine=engine(waiting=0)))
    queued = ESTIMATE.predict(request(), endpoint(engine=engine(waiting=20)))
    assert queued.ttft_p95_s > idle.ttft_p95_s + 2.0


def test_stale_queue_information_widens_the_p95_not_the_mean() -> None:
    snapshot = endpoint(kind="openai", in_flight=6, max_concurrency=4)
    prediction = ESTIMATE.predict(request(), snapshot)
    hosted = PARAMS.priors.openai
    service_s = hosted.ttft_base_s + hosted.ttft_per_token_s * 1000
    wait_s = 2 * service_s
    assert prediction.ttft_mean_s == pytest.approx(service_s + wait_s)
    # trust 0 (no gauges): the wait counts once more in the p95; cold: u = cold_uncertainty
    expected = PARAMS.cold_uncertainty * (service_s + wait_s) * hosted.ttft_spread + wait_s
    assert prediction.ttft_p95_s == pytest.approx(expected)


@pytest.mark.parametrize(
    ("latency", "expected_spread"),
    [
        (LatencyEstimate(samples=100), VLLM.ttft_spread),
        # an observed spread below the prior's tightens it
        (LatencyEstimate(samples=100, ttft_mean_s=0.2, ttft_p95_s=0.3), 1.5),
        # half warm: halfway between the prior's 2.0 and the observed 1.5
        (LatencyEstimate(samples=5, ttft_mean_s=0.2, ttft_p95_s=0.3), 1.75),
        # a wider one never widens it: the window's spread holds what the model explains
        (LatencyEstimate(samples=100, ttft_mean_s=0.2, ttft_p95_s=0.6), VLLM.ttft_spread),
        # a p95 below the mean (noise) is clamped to a spread of 1
        (LatencyEstimate(samples=100, ttft_mean_s=0.2, ttft_p95_s=0.1), 1.0),
    ],
)
def test_p95_spread_is_the_prior_tightened_by_observation(
    latency: LatencyEstimate, expected_spread: float
) -> None:
    prediction = ESTIMATE.predict(request(), endpoint(latency=latency))
    uncertainty = prediction.uncertainty
    assert prediction.ttft_p95_s / prediction.ttft_mean_s / uncertainty == pytest.approx(
        expected_spread
    )


@pytest.mark.parametrize(
    ("samples", "expected_uncertainty"),
    [(0, 3.0), (5, 2.0), (10, 1.0), (500, 1.0)],
)
def test_thin_statistics_widen_both_p95s_by_the_uncertainty(
    samples: int, expected_uncertainty: float
) -> None:
    latency = LatencyEstimate(samples=samples, ttft_mean_s=0.2, tpot_mean_s=0.02)
    prediction = ESTIMATE.predict(request(), endpoint(latency=latency))
    assert prediction.uncertainty == pytest.approx(expected_uncertainty)
    assert prediction.ttft_p95_s == pytest.approx(
        expected_uncertainty * VLLM.ttft_spread * prediction.ttft_mean_s
    )
    assert prediction.tpot_p95_s == pytest.approx(
        expected_uncertainty * VLLM.tpot_spread * prediction.tpot_mean_s
    )


@pytest.mark.parametrize(
    ("latency", "extra_mean_s", "extra_p95_s"),
    [
        (LatencyEstimate(samples=100, ttft_mean_s=0.2), 0.0, 0.0),
        # 10% throttled: 0.1 × 1 s on the mean, the whole second in the p95
        (LatencyEstimate(samples=100, throttled=10, errors=10, ttft_mean_s=0.2), 0.1, 1.0),
        # 2% other errors: 0.02 × 0.5 s on the mean, 40% of 0.5 s in the p95
        (LatencyEstimate(samples=100, errors=2, ttft_mean_s=0.2), 0.01, 0.2),
    ],
)
def test_throttling_and_errors_add_expected_penalties(
    latency: LatencyEstimate, extra_mean_s: float, extra_p95_s: float
) -> None:
    baseline = LatencyEstimate(samples=100, ttft_mean_s=0.2)
    clean = ESTIMATE.predict(request(), endpoint(latency=baseline))
    prediction = ESTIMATE.predict(request(), endpoint(latency=latency))
    assert prediction.ttft_mean_s - clean.ttft_mean_s == pytest.approx(extra_mean_s)
    assert prediction.ttft_p95_s - clean.ttft_p95_s == pytest.approx(extra_p95_s)


@pytest.mark.parametrize(
    ("snapshot", "expected_tpot_s"),
    [
        (endpoint(), 0.02),
        # 64 running of 128 that double TPOT: 1.5×
        (endpoint(engine=engine(running=64)), 0.02 * 1.5),
        # a hosted provider's TPOT does not grow with our load
        (endpoint(kind="openai", in_flight=64), PARAMS.priors.openai.tpot_s),
        # warm: the store's fit against gateway in-flight, this request included
        (
            endpoint(
                in_flight=9,
                latency=LatencyEstimate(samples=100, tpot_base_s=0.01, tpot_per_in_flight_s=0.001),
            ),
            0.01 + 0.001 * 10,
        ),
        # warm without a fit: the mean as measured
        (endpoint(in_flight=50, latency=LatencyEstimate(samples=100, tpot_mean_s=0.03)), 0.03),
    ],
)
def test_tpot_grows_with_running_sequences(
    snapshot: EndpointSnapshot, expected_tpot_s: float
) -> None:
    assert ESTIMATE.predict(request(), snapshot).tpot_mean_s == pytest.approx(expected_tpot_s)


@pytest.mark.parametrize(("samples", "cold"), [(0, True), (9, True), (10, False), (500, False)])
def test_endpoints_with_few_samples_are_cold(samples: int, cold: bool) -> None:
    snapshot = endpoint(latency=LatencyEstimate(samples=samples, ttft_mean_s=0.2))
    assert ESTIMATE.predict(request(), snapshot).cold is cold


def test_a_configured_endpoint_prior_replaces_the_kind_prior() -> None:
    fast = EndpointPrior(ttft_base_s=0.01, ttft_per_token_s=1e-5)
    estimate = Estimator(EstimateParams(endpoint_priors={"e1": fast}))
    own = estimate.predict(request(), endpoint())
    other = estimate.predict(request(), endpoint(endpoint_id="e2"))
    assert own.ttft_mean_s == pytest.approx(0.01 + 1e-5 * 1000)
    assert other.ttft_mean_s == pytest.approx(0.05 + 1e-4 * 1000)


def test_deadline_prediction_uses_max_tokens_or_the_default() -> None:
    given = ESTIMATE.predict(request(max_tokens=100), endpoint())
    default = ESTIMATE.predict(request(max_tokens=None), endpoint())
    assert given.e2e_p95_s == pytest.approx(given.ttft_p95_s + 100 * given.tpot_p95_s)
    assert default.output_tokens == PARAMS.default_output_tokens


@pytest.mark.parametrize(("samples", "expected_uncertainty"), [(0, 1.2), (5, 1.1), (10, 1.0)])
def test_a_measured_prior_carries_its_own_uncertainty(
    samples: int, expected_uncertainty: float
) -> None:
    estimate = Estimator(EstimateParams(endpoint_priors={"e1": EndpointPrior(uncertainty=1.2)}))
    latency = LatencyEstimate(samples=samples, ttft_mean_s=0.2)
    own = estimate.predict(request(), endpoint(latency=latency))
    other = estimate.predict(request(), endpoint(endpoint_id="e2", latency=latency))
    assert own.uncertainty == pytest.approx(expected_uncertainty)
    assert other.uncertainty == pytest.approx(1 + 2 * (1 - samples / 10))


def test_new_statistics_for_an_endpoint_replace_what_was_worked_out_from_the_old() -> None:
    estimate = Estimator(PARAMS)  # its own memo of fits, by endpoint id
    cold = estimate.predict(request(), endpoint())
    warm = estimate.predict(request(), endpoint(latency=WARM))
    assert cold.ttft_mean_s == pytest.approx(0.05 + 1e-4 * 1000)
    assert warm.ttft_mean_s == pytest.approx(0.1 + 0.001 * 1000)
    assert estimate.predict(request(), endpoint()) == cold


def test_a_whole_answer_is_the_predicted_parts_scaled_to_its_time() -> None:
    predicted = Prediction(0.2, 0.4, 0.02, 0.04, 11, 0.0, False)  # 0.2 + 0.02 x 10 = 0.4 s
    ttft_s, tpot_s = answer_parts(predicted, 1.2, 11)  # 3x what was predicted
    assert ttft_s == pytest.approx(0.6)
    assert tpot_s == pytest.approx(0.06)
    ttft_s, tpot_s = answer_parts(predicted, 0.3, 1)
    assert ttft_s == pytest.approx(0.3)
    assert tpot_s is None  # one token: no gap to time

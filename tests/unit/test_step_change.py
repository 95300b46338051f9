"""Step-change detection on fixed statistics: when it starts, holds, lets go, and what jumps."""

from __future__ import annotations

import dataclasses

import pytest

from policies.base import FastWindow, LatencyEstimate
from policies.step_change import Step, StepParams, follow, jumped, measured

PARAMS = StepParams()
# the window: TPOT 20 ms + 1 ms per in-flight request, TTFT 50 ms + 0.1 ms per prompt token
WINDOW = LatencyEstimate(
    samples=100,
    ttft_mean_s=0.15,
    ttft_base_s=0.05,
    ttft_per_token_s=1e-4,
    ttft_p95_s=0.3,
    tpot_mean_s=0.03,
    tpot_base_s=0.02,
    tpot_per_in_flight_s=0.001,
    tpot_p95_s=0.05,
)


def fast(tpot_s: float, in_flight: float = 10.0, n: float = 8.0, ttft_n: float = 0.0) -> FastWindow:
    """`n` stretches' worth of TPOT at `tpot_s` under `in_flight`; first tokens at 150 ms."""
    return FastWindow(ttft_n, 0.15 * ttft_n, n, tpot_s * n, 1000.0 * ttft_n, in_flight * n)


def _replace(window: FastWindow | None) -> LatencyEstimate:
    return dataclasses.replace(WINDOW, fast=window)


def test_the_reference_is_the_windows_fit_at_the_fast_windows_load() -> None:
    # 60 ms at 10 in flight: the fit says 30 ms there, so 2x; the window's mean would say 2x too
    assert measured(_replace(fast(0.06)), PARAMS) == pytest.approx((2.0, "tpot"))
    # 60 ms at 40 in flight is what the fit expects: no step, though the mean is 30 ms
    assert measured(_replace(fast(0.06, in_flight=40)), PARAMS) == pytest.approx((1.0, "tpot"))


def test_a_3x_slowdown_starts_a_step_and_the_estimate_jumps() -> None:
    step = follow(None, _replace(fast(0.09)), PARAMS, at_s=100.0)
    assert step is not None and step.ratio == pytest.approx(3.0)
    assert (step.signal, step.since_s, step.confirmed_s) == ("tpot", 100.0, 100.0)
    stepped = jumped(_replace(fast(0.09)), step)
    assert stepped.tpot_mean_s == pytest.approx(0.09)
    assert stepped.tpot_p95_s == pytest.approx(0.15)
    assert stepped.ttft_base_s == pytest.approx(0.05)  # no first tokens say TTFT moved
    assert stepped.step_ratio == pytest.approx(3.0)
    assert (stepped.step_signal, stepped.step_at_s) == ("tpot", 100.0)
    assert jumped(WINDOW, None) is WINDOW


def test_a_tpot_step_is_a_level_whatever_the_load() -> None:
    # the window's fit read the slowdown as load: no base, all slope (a slowed engine holds more)
    confounded = dataclasses.replace(WINDOW, tpot_base_s=0.0, tpot_per_in_flight_s=0.004)
    stepped = jumped(confounded, Step(1.5, "tpot", 100.0, 100.0))
    assert stepped.tpot_per_in_flight_s == 0.0  # one request in flight is no faster than ten
    assert stepped.tpot_base_s == stepped.tpot_mean_s == pytest.approx(0.045)


def test_noise_below_the_threshold_and_speed_ups_do_not_start_one() -> None:
    assert follow(None, _replace(fast(0.04)), PARAMS, at_s=0.0) is None  # 1.33x
    assert follow(None, _replace(fast(0.01)), PARAMS, at_s=0.0) is None  # 3x faster
    assert follow(None, _replace(fast(0.09, n=3)), PARAMS, at_s=0.0) is None  # too few
    assert follow(None, _replace(None), PARAMS, at_s=0.0) is None


def test_a_step_holds_on_less_evidence_and_while_traffic_is_gone() -> None:
    started = Step(3.0, "tpot", 100.0, 100.0)
    held = follow(started, _replace(fast(0.039)), PARAMS, at_s=101.0)  # 1.3x: above release
    assert held is not None and held.ratio == pytest.approx(1.3)
    assert (held.since_s, held.confirmed_s) == (100.0, 101.0)
    assert follow(started, _replace(fast(0.033)), PARAMS, at_s=101.0) is None  # 1.1x: caught up
    quiet = follow(started, _replace(None), PARAMS, at_s=119.0)
    assert quiet is started  # no samples: the last ratio holds
    assert follow(started, _replace(None), PARAMS, at_s=120.0) is None  # hold_s after it


def test_ttft_decides_only_without_enough_stretches_and_scales_ttft_only() -> None:
    slow_ttft = FastWindow(8.0, 8 * 0.45, 0.0, 0.0, 8 * 1000.0, 0.0)  # 3x the fit's 150 ms
    step = follow(None, _replace(slow_ttft), PARAMS, at_s=5.0)
    assert step is not None and step.signal == "ttft"
    stepped = jumped(_replace(slow_ttft), step)
    assert stepped.ttft_mean_s == pytest.approx(0.45)
    assert stepped.tpot_mean_s == pytest.approx(0.03)  # untouched


COLD = dataclasses.replace(WINDOW, samples=6)  # fewer than cold_below: mostly prior


def test_a_cold_endpoint_is_judged_on_one_stretch_at_a_higher_bar() -> None:
    one = fast(0.075, n=1.0)  # one stretch at 2.5x the fit's 30 ms
    step = follow(None, dataclasses.replace(COLD, fast=one), PARAMS, at_s=7.0)
    assert step is not None and (step.signal, step.since_s) == ("tpot", 7.0)
    assert step.ratio == pytest.approx(2.5)
    assert follow(None, _replace(one), PARAMS, at_s=7.0) is None  # warm: six stretches needed
    noisy = dataclasses.replace(COLD, fast=fast(0.054, n=1.0))  # 1.8x: a prefill stall's worth
    assert follow(None, noisy, PARAMS, at_s=7.0) is None
    assert follow(None, dataclasses.replace(COLD, fast=fast(0.09, n=0.5)), PARAMS, 7.0) is None


def test_a_cold_endpoint_is_judged_on_one_first_token_without_a_stretch() -> None:
    first = FastWindow(1.0, 0.45, 0.0, 0.0, 1000.0, 0.0)  # 3x the fit's 150 ms
    step = follow(None, dataclasses.replace(COLD, fast=first), PARAMS, at_s=3.0)
    assert step is not None and step.signal == "ttft"
    assert step.ratio == pytest.approx(3.0)
    assert follow(None, _replace(first), PARAMS, at_s=3.0) is None  # warm: six first tokens


def test_a_cold_step_once_started_holds_at_the_release_bar() -> None:
    started = Step(2.5, "tpot", 7.0, 7.0)
    held = follow(started, dataclasses.replace(COLD, fast=fast(0.045, n=1.0)), PARAMS, 8.0)
    assert held is not None and held.ratio == pytest.approx(1.5)
    assert held.since_s == 7.0


def test_a_tpot_led_step_scales_ttft_by_its_own_first_tokens_only() -> None:
    # 8 stretches at 3x the fit's TPOT, and 8 first tokens of 1,000 prompt tokens at 0.45 s
    # (the fit says 0.15 s there): TTFT jumps by its own 3x
    slowed = FastWindow(8.0, 0.45 * 8, 8.0, 0.09 * 8, 1000.0 * 8, 10.0 * 8)
    step = follow(None, _replace(slowed), PARAMS, at_s=100.0)
    assert step is not None and step.signal == "tpot"
    assert step.ttft_ratio == pytest.approx(3.0)
    stepped = jumped(_replace(slowed), step)
    assert stepped.ttft_base_s == pytest.approx(0.15) and stepped.tpot_mean_s == pytest.approx(0.09)
    # first tokens as fast as the fit expects: TPOT jumps, TTFT stays
    steady = jumped(
        _replace(fast(0.09, ttft_n=8.0)),
        follow(None, _replace(fast(0.09, ttft_n=8.0)), PARAMS, 0.0),
    )
    assert steady.ttft_base_s == pytest.approx(0.05) and steady.tpot_mean_s == pytest.approx(0.09)

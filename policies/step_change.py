"""Step-change detection: an endpoint whose last seconds are a step slower than its window.

Method
    The stores keep, besides the rolling window (gateway/state/window.py: 5 s buckets, 15 s
    half-life), a *fast window*: plain sums of the last `FAST_BUCKETS` buckets of
    `FAST_BUCKET_S` (the last 1-2 s: short, so that the first slow second is not outweighed by
    the fast tokens before it, which come 3x as thick), fed by the same samples, first tokens
    and running streams' stretches included (gateway/core/progress.py), carried as
    `LatencyEstimate.fast`. A ratio test compares them:
        r_tpot = fast TPOT mean / window TPOT fit at the fast window's mean in-flight count
        r_ttft = fast TTFT mean / window TTFT fit at the fast window's mean prompt length
    (r_tpot needs `min_samples` stretches' worth of weight, r_ttft as many first tokens; a cold
    endpoint, see below, `cold_min_samples`). The window's fit, not its mean, is the reference:
    TPOT grows with the load and TTFT with the prompt, so a quiet few seconds after a busy
    minute would hide a slowdown from a ratio of means, and a burst of long prompts would fake
    one. TPOT leads: decode speed is what an
    engine slowdown changes everywhere, and it does not depend on the queue (which the estimate
    models on its own, so a TTFT grown by queueing must not count twice). TTFT decides only
    when the fast window holds too few stretches.

    A cold endpoint (fewer than `cold_below` samples in its window: the estimate's default
    `min_samples`, below which its statistics are mostly prior) is judged on one stretch or one
    first token, at r ≥ `cold_threshold` (2: the issue's "2-3x slower"). It takes so little
    traffic that, 3x slower, its one stream yields a stretch a second: six would take seconds in
    which it keeps getting requests (the reaction scenario's seed 2: 3.88 s from the slowdown to
    the last one). One stretch is noisy (another request's prefill stalls its steps), hence the
    higher bar: at 1.5, cold engines showed false steps of 1.5-1.8x in the warm-up and ~2.25x
    in a burst, in half the seeds; at 2 only the burst's remain, where TPOT really was 2x the
    window's. A false step on a cold endpoint costs little: it is barely used, and the step lets
    go once its fast window is within `release` (after `hold_s` without traffic).

    A step starts at r ≥ `threshold` (`cold_threshold` on a cold endpoint) and, once started,
    holds (`follow`):
    - while the fast window has samples, at its r, for as long as r ≥ `release` (a step already
      seen needs less evidence to go on than a new one; below it the window has caught up, or
      the endpoint has recovered);
    - while it has none (traffic left the endpoint, as it should), at the last r, for `hold_s`
      after the last confirmation, after which the window alone decides again (its slow samples
      still count, and a few requests find out whether the endpoint is still slow).
    On a step the estimate *jumps*: every latency statistic of the window (means, fits,
    quantiles) is scaled by r, so the estimate carries the fast window's level at once instead
    of decaying toward it over the half-life. A TPOT-led step scales the TPOT statistics, and
    TTFT's only by the fast window's own TTFT ratio, when it holds enough first tokens and
    that ratio is above 1 (a slower prefill shows in TTFT itself); a TTFT-led one scales TTFT
    only. TPOT on a prefill-heavy engine swings with the prefills that share its steps: when
    such a swing also scaled TTFT, conversations left the engines holding their prefixes
    (sessions_slow, slo_aware with prefix: 85.9% chat attainment, 91.3% without it; the
    reaction scenario is the same either way). Only a slowdown jumps: a fast
    window of a few seconds is noisy (a stretch whose steps held no prefill is quick), and a
    jump down would herd the next requests onto the endpoint on that noise, while a jump up at
    worst spills a few requests elsewhere for a few seconds; a speed-up shows as the window
    decays.
    A TPOT-led step replaces the window's TPOT fit by its scaled mean, flat: a slowed engine
    holds more requests at once, so the window's fit reads the slowdown as load (its base fell
    to 0 and its slope took it all, live), and the next request, on an engine that traffic has
    left, was predicted fast at its low in-flight count and sent there again 2-4 s after the
    slowdown (tests/integration/test_whole_answer_reaction.py, streamed).
    A step also resets the measured p95 of what it scales (the ratio counts, see
    policies/estimate.py, Calibrated quantiles) to the cold spread while it holds.

Parameters (`StepParams`): threshold 1.5, release 1.2, min_samples 6, hold_s 20; cold_below 10,
cold_min_samples 1, cold_threshold 2. Pure: no clock; the caller passes the time and the
previous step.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from policies.base import LatencyEstimate

FAST_BUCKET_S = 1.0
FAST_BUCKETS = 2
_TTFT_FIELDS = ("ttft_mean_s", "ttft_base_s", "ttft_per_token_s", "ttft_p50_s", "ttft_p95_s")
_TPOT_FIELDS = ("tpot_mean_s", "tpot_base_s", "tpot_per_in_flight_s", "tpot_p50_s", "tpot_p95_s")


@dataclass(frozen=True, slots=True)
class StepParams:
    threshold: float = 1.5
    release: float = 1.2
    min_samples: int = 6
    hold_s: float = 20.0
    cold_below: int = 10  # an endpoint whose window holds fewer samples is cold
    cold_min_samples: float = 1.0
    cold_threshold: float = 2.0


@dataclass(frozen=True, slots=True)
class Step:
    """A detected step: its ratio r and signal, when it began and when last confirmed."""

    ratio: float
    signal: str  # "tpot" or "ttft"
    since_s: float
    confirmed_s: float
    ttft_ratio: float | None = None  # a TPOT-led step's TTFT ratio, when the fast window has one


def _expected(
    base: float | None, slope: float | None, mean: float | None, x_sum: float, n: float
) -> float | None:
    """The window's fit at the fast window's mean x (its mean without a fit)."""
    if base is None or slope is None:
        return mean
    return base + slope * (x_sum / n)


def _cold(estimate: LatencyEstimate, params: StepParams) -> bool:
    return estimate.samples < params.cold_below


def measured(estimate: LatencyEstimate, params: StepParams) -> tuple[float, str] | None:
    """(r, signal) from the fast window, or None when it holds too few samples to say."""
    fast, e = estimate.fast, estimate
    need = params.cold_min_samples if _cold(e, params) else params.min_samples
    if fast is None:
        return None
    if fast.tpot_n >= need:
        expected = _expected(
            e.tpot_base_s, e.tpot_per_in_flight_s, e.tpot_mean_s, fast.in_flight_sum, fast.tpot_n
        )
        return (fast.tpot_sum_s / fast.tpot_n / expected, "tpot") if expected else None
    if fast.ttft_n >= need:
        expected = _expected(
            e.ttft_base_s, e.ttft_per_token_s, e.ttft_mean_s, fast.prompt_tokens_sum, fast.ttft_n
        )
        return (fast.ttft_sum_s / fast.ttft_n / expected, "ttft") if expected else None
    return None


def _ttft_ratio(estimate: LatencyEstimate, params: StepParams, signal: str) -> float | None:
    """A TPOT-led step's own TTFT evidence: the fast window's TTFT against the window's fit."""
    fast, e = estimate.fast, estimate
    need = params.cold_min_samples if _cold(e, params) else params.min_samples
    if signal != "tpot" or fast is None or fast.ttft_n < need:
        return None
    expected = _expected(
        e.ttft_base_s, e.ttft_per_token_s, e.ttft_mean_s, fast.prompt_tokens_sum, fast.ttft_n
    )
    return fast.ttft_sum_s / fast.ttft_n / expected if expected else None


def follow(
    previous: Step | None, estimate: LatencyEstimate, params: StepParams, at_s: float
) -> Step | None:
    """The step at `at_s`, given the one before (see the module docstring)."""
    seen = measured(estimate, params)
    if seen is None:
        if previous is not None and at_s - previous.confirmed_s < params.hold_s:
            return previous
        return None
    ratio, signal = seen
    threshold = params.cold_threshold if _cold(estimate, params) else params.threshold
    if ratio >= threshold or (previous is not None and ratio >= params.release):
        since_s = previous.since_s if previous is not None else at_s
        return Step(ratio, signal, since_s, at_s, _ttft_ratio(estimate, params, signal))
    return None


def jumped(estimate: LatencyEstimate, step: Step | None) -> LatencyEstimate:
    """The estimate with the step applied (itself without one)."""
    if step is None:
        return estimate
    ratio = step.ratio
    fields: dict[str, object] = {
        "step_ratio": ratio,
        "step_signal": step.signal,
        "step_at_s": step.since_s,
    }
    scales = [(_TPOT_FIELDS, ratio)] if step.signal == "tpot" else [(_TTFT_FIELDS, ratio)]
    if step.ttft_ratio is not None and step.ttft_ratio > 1.0:
        scales.append((_TTFT_FIELDS, step.ttft_ratio))
    for names, scale in scales:
        for name in names:
            value = getattr(estimate, name)
            fields[name] = value * scale if value is not None else None
        # the deviations measured before the step say nothing of it: the p95 starts cold
        fields["ttft_ratio_n" if names is _TTFT_FIELDS else "tpot_ratio_n"] = 0
    if step.signal == "tpot":  # a level, not a slope: see the module docstring
        fields.update(tpot_base_s=fields["tpot_mean_s"], tpot_per_in_flight_s=0.0)
    return dataclasses.replace(estimate, **fields)  # type: ignore[arg-type]

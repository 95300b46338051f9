"""Predict TTFT and TPOT for one request on one endpoint: a mean and a p95 for each.

Notation: P = the request's prompt tokens, N = its output tokens (max_tokens, else
`default_output_tokens`), I = gateway-wide in-flight leases on the endpoint (instantaneous),
W, R, p = engine waiting (for capacity), running, preemptions/s (`age_s` old; engine_pressure.py),
F = uncached prompt tokens of this replica's in-flight requests there before their first token
(`prefill_tokens`).

Model (seconds)
    service   = a + b·(P − C)                              prefill of its uncached tokens
    wait      = queued · (a + b·P̄) · stretch               prefill work queued ahead of it
    prefill   = (1 − w)·max(0, b·F − wait)                 ... and started ahead of it, cold
    ttft_mean = service + wait + prefill + Σ rate·penalty
    ttft_p95  = (service + b·C·(1 − h) + wait + prefill)·q_ttft + wait·(1 − trust)
                + Σ min(1, rate/0.05)·penalty
    tpot_mean = w·(c + d·(max(I, 1) + 1)) + (1 − w)·t·(1 + running / tpot_double_running)
    tpot_p95  = tpot_mean·q_tpot
    e2e_p95   = ttft_p95 + tpot_p95·N                      (used for deadline classes)

Calibrated quantiles: q = p95 / mean, measured
    q_ttft = u·ttft_spread + k·(q̂_ttft − u·ttft_spread),  k = min(1, n / calibration_samples)
    (TPOT alike). q̂ is the 95th percentile of measured / predicted mean over the endpoint's
    recent outcomes routed on a prediction, and n how many there were (gateway/state/window.py:
    ratio histograms in the same time buckets as the rest, decayed alike, merged across
    replicas by addition). So the p95 is as wide as the endpoint's real deviation from the
    model: wide while cold (u·spread, below), narrow on a steady endpoint, wider where the
    model errs. A detected step (policies/step_change.py) sets n to 0: the deviations measured
    before it say nothing about after. The coverage of these p95s (the share of outcomes within
    them) is exported (slo_gateway_p95_coverage, the offline report).

Whole answers: a request that does not stream shows only its end-to-end time E and its N
output tokens, one measurement of the model's own quantity ttft + tpot·(N − 1). It is learned as
the prediction made for it, scaled to what was measured (`answer_parts`):
    ttft = r·ttft_mean,  tpot = r·tpot_mean,  r = E / (ttft_mean + tpot_mean·(N − 1))
so r goes into both ratio histograms, and the scaled parts into the window's fits and the fast
window, where the step-change detector sees a slowed engine through whole answers as through
streams. A whole answer cannot say which part was slow, so both carry its deviation alike.

Prefix cache: C = the request's `cached_tokens` for the endpoint, the tokens of this prompt
predicted to be in the endpoint's prefix cache (gateway/core/prefix_index.py), already
discounted by the index's measured precision there (EWMA of actual / predicted). The p95 counts
on h = `prefix_p95_hit_share` of them, by default all: a lower h discounts the index's error a
second time and charges the written-off tokens at u·spread, so on slow prefill a (cold) holder
of a long prefix is judged to miss targets it meets (lower h for an index that loses hits its
precision does not show). The store's fit is learned on uncached prompt tokens (the gateway
records P − actual cached), so b is a slope per computed token and P̄ the typical uncached
prefill of a queued request.

Prefill ahead: an engine computes the prompts it has already taken before a new one's (chunked
prefill shares each step's token budget), so a burst of long prompts delays each other's first
tokens long before the batch is full. A warm fit holds the endpoint's typical share of this in
its base; a prior holds none, and a cold endpoint takes a burst before any answer has shown
what it costs (sessions_rag: five 2,000-token first turns per cold engine, each predicted 0.2 s
and answered in 3 s). So while cold, the prefill this replica has sent there and not yet seen
start answering counts, by coldness (1 − w), fused with the queue's wait (the larger of the
two: requests past the batch are in both). Endpoints whose prior has no `batch_slots` (a
hosted fleet) are not held to it. F is this replica's alone: other replicas' bursts show in
the engine's gauges.

Coefficients, each blended between the endpoint's statistics and a prior by warmth
    warmth    w = min(1, samples / min_samples); value = w·observed + (1 − w)·prior. An endpoint
              with w < 1 is *cold*: policies give it a small exploration share.
    a, b      TTFT base and per-prompt-token slope from the store's fit (`ttft_base_s`,
              `ttft_per_token_s`). A slope ≤ 0 or missing says nothing about prompt length
              (equal prompts, cache hits), so then b = the prior slope and a = mean − b·P̄.
              P̄ = the endpoint's `prompt_tokens_mean`, else `mean_prompt_tokens`. The fit holds
              the window's typical queueing, so adding the queue term makes TTFT conservative by
              that typical queue (about zero for a healthy endpoint).
    c, d      TPOT base and slope per gateway in-flight request from the store's fit
              (`tpot_base_s`, `tpot_per_in_flight_s`; I + 1 counts this request), else the
              mean TPOT as measured. An idle endpoint is read at one other request's load
              (max(I, 1)): the line is fitted over the loads the window saw, and after a
              slowdown it reads the slowdown as load (base near 0, a steep slope), so at no
              load it predicted a slowed engine faster than idle (7.8 ms against 32 ms
              measured) and sent it requests again 2.2-2.5 s after the slowdown.
    t         the prior's TPOT of an idle endpoint; `tpot_double_running` = running sequences
              that double it (the endpoint's max_concurrency, its batch size, when configured;
              None: TPOT does not grow with our load, as for a large hosted fleet).
    spreads   the cold p95/mean around the model's mean (q before outcomes are measured): the
              prior's, lowered towards the observed
              `ttft_p95_s / ttft_mean_s` (and TPOT alike) but never raised by it. The observed
              ratio is over the whole window, so it also holds the variation that the model
              already explains (prompt lengths, load, queues) and overstates the spread left
              around a prediction; it can show that an endpoint is steadier than the prior says,
              not that it is wilder (a slower endpoint shows in the fitted mean instead).
    u         uncertainty = 1 + (U − 1)·(1 − w): how much slower than its blended estimate an
              endpoint could plausibly be while its statistics are thin (a prior is only a guess
              about this endpoint). 1 once warm. U = the prior's `uncertainty` when it sets one
              (a prior measured with `slo-gateway bench` can say 1.2), else `cold_uncertainty`.
              The p95s above are the cautious bound; p95 / u² is the optimistic one (u times
              faster than the central estimate).
              Policies trust an endpoint to meet an SLO when the cautious bound meets it, and
              call it unproven when only the optimistic one does.
    rates     throttled (429) and other errors per sample, times w (few samples say little);
              a 429 costs `throttle_penalty_s` (a Retry-After), an error `error_penalty_s` (a
              failover). The p95 carries the full penalty once the rate reaches 5%.

Load: instantaneous gateway counts fused with lagging engine gauges
    trust       = 0.5 ** (age_s / gauge_half_life_s); 0 without engine gauges or their age.
    slots       = max_concurrency, else the prior's `batch_slots` (None: unbounded).
    queued      = trust·W + (1 − trust)·max(0, I − slots), and never below I − max_concurrency,
                  since leases beyond a concurrency limit wait whatever the gauges say.
    running     = trust·R + (1 − trust)·min(I, slots)
    stretch     = 1 / (1 − min(0.9, trust·p·(a + b·P̄))): preempted requests rejoin ahead

A missing observation (no fit, no mean, no p95) counts as the prior's value.

Parameters (`EstimateParams`, defaults)
    min_samples 10 · cold_uncertainty 3.0 · gauge_half_life_s 2.0 · default_output_tokens 256
    mean_prompt_tokens 1000 · throttle_penalty_s 1.0 · error_penalty_s 0.5 ·
    prefix_p95_hit_share 1.0 · calibration_samples 40
    priors.vllm    ttft_base_s 0.05, ttft_per_token_s 1e-4, tpot_s 0.02, ttft_spread 2.0,
                   tpot_spread 1.6, batch_slots 128, tpot_double_running 128
    priors.openai  ttft_base_s 0.5, ttft_per_token_s 2e-5, tpot_s 0.015, ttft_spread 2.5,
                   tpot_spread 1.5, batch_slots None, tpot_double_running None
    endpoint_priors  {endpoint_id: prior}, replacing the kind's prior for that endpoint (seed
                   them from `slo-gateway bench` runs against each endpoint); a prior's own
                   `uncertainty` (default None) replaces cold_uncertainty for it
    Spreads are ceilings (see above), so the vLLM prior's allow for continuous batching:
    prefills of arriving requests stall running decodes (TPOT) and queue behind each other
    (TTFT). cold_uncertainty 3 says a prior may be off by up to 3×: a cold vLLM replica then
    proves itself before it is trusted with a TPOT target under 3 × 0.02 × 1.6 ≈ 0.1 s.

Use: `Estimator(params)` once, then `predict_all(request, candidates) -> [Prediction]` per request.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.base import EndpointSnapshot, LatencyEstimate, Prediction, RouteRequest
from policies.engine_pressure import fused_load
from policies.estimate_params import (
    EndpointFit,
    EndpointPrior,
    EstimateParams,
    PlainPrior,
    blended_spread,
    calibrated,
    tail_share,
    tpot_fit,
    ttft_coefficients,
)

__all__ = ["EndpointPrior", "EstimateParams", "Estimator", "Prediction", "answer_parts"]


class Estimator:
    """`EstimateParams` compiled for the hot path: plain attributes and plain priors.

    Reading a pydantic attribute costs about three times a slots attribute, and `predict` runs
    once per candidate per request, so the validated config is copied here once. What depends
    only on an endpoint's statistics and prior (warmth, coefficients, spreads, penalties) is
    worked out once per statistics object and kept (`_fits`, by endpoint id, with the object):
    the gateway's shared view hands the same `LatencyEstimate` to every request until its next
    refresh. The prior follows the endpoint's id and kind, which only a new config (so a new
    estimator) changes. The memo is cleared past `FIT_MEMO_SIZE`; it changes no result.
    """

    __slots__ = (
        "_calibration_samples",
        "_endpoint_priors",
        "_error_penalty_s",
        "_extra_uncertainty",
        "_fits",
        "_half_life_s",
        "_kind_priors",
        "_mean_prompt_tokens",
        "_min_samples",
        "_miss_p95",
        "_throttle_penalty_s",
        "default_output_tokens",
        "params",
    )

    def __init__(self, params: EstimateParams) -> None:
        self.params = params
        self.default_output_tokens = params.default_output_tokens
        self._min_samples = params.min_samples
        self._half_life_s = params.gauge_half_life_s
        self._mean_prompt_tokens = params.mean_prompt_tokens
        self._miss_p95 = 1.0 - params.prefix_p95_hit_share
        self._throttle_penalty_s = params.throttle_penalty_s
        self._error_penalty_s = params.error_penalty_s
        self._extra_uncertainty = params.cold_uncertainty - 1.0
        self._calibration_samples = params.calibration_samples
        self._kind_priors = {
            "vllm": PlainPrior.of(params.priors.vllm),
            "openai": PlainPrior.of(params.priors.openai),
        }
        self._endpoint_priors = {k: PlainPrior.of(v) for k, v in params.endpoint_priors.items()}
        self._fits: dict[str, EndpointFit] = {}

    def _prior(self, snapshot: EndpointSnapshot) -> PlainPrior:
        own = self._endpoint_priors.get(snapshot.endpoint_id) if self._endpoint_priors else None
        return own or self._kind_priors[snapshot.kind]

    def predict(self, request: RouteRequest, snapshot: EndpointSnapshot) -> Prediction:
        """The model above for one endpoint."""
        fit = self._fits.get(snapshot.endpoint_id)
        if fit is None or fit.stats is not snapshot.latency:
            fit = self._remember(snapshot)
        load = fused_load(snapshot, fit, self._half_life_s)
        cached = request.cached_tokens.get(snapshot.endpoint_id, 0.0)
        wait_s = load.queued * fit.mean_service_s * load.stretch
        # cold (weight 1 − w): the prefill sent ahead and not yet answering, past the wait
        prefill_s = fit.prefill_weight * max(0.0, fit.b * snapshot.prefill_tokens - wait_s)
        ahead_s = fit.a + fit.b * (request.prompt_tokens - cached) + wait_s + prefill_s
        fewer_hits_s = fit.b * cached * self._miss_p95  # fewer hits than predicted
        ttft_p95_s = (
            (ahead_s + fewer_hits_s) * fit.ttft_scale
            + wait_s * (1.0 - load.trust)
            + fit.penalty_p95_s
        )
        tpot_mean_s = fit.idle_tpot_s
        if fit.doubling_running:  # a known batch size: a full batch about doubles an idle TPOT
            tpot_mean_s *= 1.0 + load.running / (snapshot.max_concurrency or fit.doubling_running)
        if fit.tpot_base_s is not None:
            loaded = snapshot.in_flight if snapshot.in_flight > 1 else 1  # see c, d above
            observed_s = fit.tpot_base_s + fit.tpot_slope_s * (loaded + 1)
            tpot_mean_s += fit.warmth * (observed_s - tpot_mean_s)
        # built once per endpoint per request: tuple.__new__ on the values costs half of
        # Prediction(...) (0.11 against 0.26 µs), a twentieth of a 20-endpoint decision
        return _new_tuple(
            Prediction,
            (
                ahead_s + fit.penalty_mean_s,
                ttft_p95_s,
                tpot_mean_s,
                tpot_mean_s * fit.tpot_scale,
                self.default_output_tokens if request.max_tokens is None else request.max_tokens,
                load.queued,
                fit.cold,
                fit.uncertainty,
            ),
        )

    def predict_all(
        self, request: RouteRequest, snapshots: Sequence[EndpointSnapshot]
    ) -> list[Prediction]:
        """The model above for each endpoint."""
        return [self.predict(request, snapshot) for snapshot in snapshots]

    def _remember(self, snapshot: EndpointSnapshot) -> EndpointFit:
        """Work out and keep the endpoint's fit, until its statistics object is replaced."""
        if len(self._fits) >= FIT_MEMO_SIZE:
            self._fits.clear()
        fit = self.fit_of(snapshot)
        self._fits[snapshot.endpoint_id] = fit
        return fit

    def fit_of(self, snapshot: EndpointSnapshot) -> EndpointFit:
        """The endpoint's coefficients: its statistics blended with its prior by warmth."""
        stats, prior = snapshot.latency, self._prior(snapshot)
        warmth = min(1.0, stats.samples / self._min_samples)
        extra = self._extra_uncertainty if prior.uncertainty is None else prior.uncertainty - 1
        uncertainty = 1.0 + extra * (1.0 - warmth)
        a, b = ttft_coefficients(stats, prior, warmth, self._mean_prompt_tokens)
        ttft_spread = blended_spread(stats.ttft_p95_s, stats.ttft_mean_s, prior.ttft_spread, warmth)
        tpot_spread = blended_spread(stats.tpot_p95_s, stats.tpot_mean_s, prior.tpot_spread, warmth)
        penalty_mean_s = penalty_p95_s = 0.0
        if stats.errors and stats.samples:
            penalty_mean_s, penalty_p95_s = self._failure_penalties(stats, warmth)
        tpot_base_s, tpot_slope_s = tpot_fit(stats)
        return EndpointFit(
            stats=stats,
            a=a,
            b=b,
            mean_service_s=a + b * (stats.prompt_tokens_mean or self._mean_prompt_tokens),
            ttft_scale=calibrated(
                uncertainty * ttft_spread,
                stats.ttft_ratio_p95,
                stats.ttft_ratio_n,
                self._calibration_samples,
            ),
            tpot_scale=calibrated(
                uncertainty * tpot_spread,
                stats.tpot_ratio_p95,
                stats.tpot_ratio_n,
                self._calibration_samples,
            ),
            warmth=warmth,
            tpot_base_s=tpot_base_s,
            tpot_slope_s=tpot_slope_s,
            penalty_mean_s=penalty_mean_s,
            penalty_p95_s=penalty_p95_s,
            uncertainty=uncertainty,
            cold=warmth < 1.0,
            prior_slots=prior.batch_slots,
            idle_tpot_s=prior.tpot_s,
            doubling_running=prior.tpot_double_running,
            prefill_weight=1.0 - warmth if prior.batch_slots is not None else 0.0,
        )

    def _failure_penalties(self, stats: LatencyEstimate, warmth: float) -> tuple[float, float]:
        # `errors` counts every failed request, 429s included; `throttled` only the 429s
        per_sample = warmth / stats.samples
        throttle_rate = stats.throttled * per_sample
        error_rate = (stats.errors - stats.throttled) * per_sample
        error_rate = error_rate if error_rate > 0 else 0.0
        mean_s = throttle_rate * self._throttle_penalty_s + error_rate * self._error_penalty_s
        p95_s = (
            tail_share(throttle_rate) * self._throttle_penalty_s
            + tail_share(error_rate) * self._error_penalty_s
        )
        return mean_s, p95_s


def answer_parts(
    predicted: Prediction, e2e_s: float, output_tokens: int
) -> tuple[float, float | None]:
    """A whole answer's (TTFT, TPOT) as the model's parts scaled to its measured time (module
    docstring, Whole answers); TPOT None with fewer than two tokens."""
    gaps = max(0, output_tokens - 1)
    expected_s = predicted.ttft_mean_s + predicted.tpot_mean_s * gaps
    r = e2e_s / expected_s if expected_s > 0 else 1.0
    return r * predicted.ttft_mean_s, r * predicted.tpot_mean_s if gaps else None


FIT_MEMO_SIZE = 4096
_new_tuple = tuple.__new__

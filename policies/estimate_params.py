"""The estimate's parameters and priors, and how an endpoint's statistics blend with its prior.

`policies.estimate` holds the model and its notation; this module holds what it is configured
with (`EstimateParams`, `EndpointPrior`) and the pure per-endpoint pieces of its fit: TTFT
coefficients, the TPOT fit, spreads and the share of a failure penalty in the p95, and the fit
they add up to (`EndpointFit`, kept per statistics object).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from policies.base import LatencyEstimate

P95_TAIL = 0.05  # a failure rate at or above this puts its whole penalty into the p95


class EndpointPrior(BaseModel):
    """What to assume about an endpoint before it has `min_samples` observations."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    ttft_base_s: float = Field(default=0.05, ge=0)
    ttft_per_token_s: float = Field(default=1e-4, ge=0)
    tpot_s: float = Field(default=0.02, gt=0)
    ttft_spread: float = Field(default=2.0, ge=1, description="TTFT p95 / mean, a ceiling")
    tpot_spread: float = Field(default=1.6, ge=1, description="TPOT p95 / mean, a ceiling")
    batch_slots: int | None = Field(default=128, ge=1)
    tpot_double_running: float | None = Field(default=128.0, gt=0)
    uncertainty: float | None = Field(
        default=None, ge=1, description="how far off it may be; None: cold_uncertainty"
    )


def _hosted_prior() -> EndpointPrior:
    return EndpointPrior(
        ttft_base_s=0.5,
        ttft_per_token_s=2e-5,
        tpot_s=0.015,
        ttft_spread=2.5,
        tpot_spread=1.5,
        batch_slots=None,
        tpot_double_running=None,
    )


class KindPriors(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    vllm: EndpointPrior = EndpointPrior()
    openai: EndpointPrior = _hosted_prior()


class EstimateParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    min_samples: int = Field(default=10, ge=1)
    cold_uncertainty: float = Field(default=3.0, ge=1, description="a prior may be off by")
    gauge_half_life_s: float = Field(default=2.0, gt=0)
    default_output_tokens: int = Field(default=256, ge=1)
    mean_prompt_tokens: float = Field(default=1000.0, ge=0)
    throttle_penalty_s: float = Field(default=1.0, ge=0)
    error_penalty_s: float = Field(default=0.5, ge=0)
    prefix_p95_hit_share: float = Field(
        default=1.0, ge=0, le=1, description="of the predicted cached tokens the p95 counts on"
    )
    calibration_samples: int = Field(
        default=40, ge=1, description="measured outcomes at which the p95 is all measured"
    )
    priors: KindPriors = KindPriors()
    endpoint_priors: dict[str, EndpointPrior] = Field(default_factory=dict)


def tail_share(rate: float) -> float:
    """How much of a penalty that strikes `rate` of requests shows in the p95."""
    return rate / P95_TAIL if rate < P95_TAIL else 1.0


@dataclass(frozen=True, slots=True)
class PlainPrior:
    """An `EndpointPrior` as plain attributes."""

    ttft_base_s: float
    ttft_per_token_s: float
    tpot_s: float
    ttft_spread: float
    tpot_spread: float
    batch_slots: int | None
    tpot_double_running: float | None
    uncertainty: float | None

    @classmethod
    def of(cls, prior: EndpointPrior) -> PlainPrior:
        return cls(**prior.model_dump())


def ttft_coefficients(
    stats: LatencyEstimate, prior: PlainPrior, warmth: float, default_prompt: float
) -> tuple[float, float]:
    slope = stats.ttft_per_token_s
    if stats.ttft_base_s is not None and slope is not None and slope > 0:
        base_s = stats.ttft_base_s
    elif stats.ttft_mean_s is not None:
        slope = prior.ttft_per_token_s
        base_s = stats.ttft_mean_s - slope * (stats.prompt_tokens_mean or default_prompt)
        base_s = base_s if base_s > 0 else 0.0
    else:
        return prior.ttft_base_s, prior.ttft_per_token_s
    return (
        prior.ttft_base_s + warmth * (base_s - prior.ttft_base_s),
        prior.ttft_per_token_s + warmth * (slope - prior.ttft_per_token_s),
    )


def tpot_fit(stats: LatencyEstimate) -> tuple[float | None, float]:
    """Observed TPOT as base + slope·(I + 1): the store's fit, else the flat measured mean."""
    slope_s = stats.tpot_per_in_flight_s
    if stats.tpot_base_s is not None and slope_s is not None:
        return stats.tpot_base_s, slope_s if slope_s > 0 else 0.0
    return stats.tpot_mean_s, 0.0


def blended_spread(
    quantile: float | None, mean: float | None, prior: float, warmth: float
) -> float:
    """p95 / mean: the prior's, lowered by warmth towards an observed one below it."""
    if quantile is None or not mean or quantile >= prior * mean:
        return prior
    observed = quantile / mean if quantile > mean else 1.0
    return prior + warmth * (observed - prior)


def calibrated(cold_scale: float, ratio_p95: float | None, count: int, full: int) -> float:
    """p95 / mean: the measured p95 of measured / predicted, blended from the cold scale by
    how many outcomes were measured (all measured from `full` on)."""
    if ratio_p95 is None:
        return cold_scale
    share = count / full if count < full else 1.0
    return cold_scale + share * (ratio_p95 - cold_scale)


class EndpointFit(NamedTuple):
    """What the model needs of one endpoint's statistics and prior (policies.estimate,
    Coefficients), worked out once per statistics object."""

    stats: LatencyEstimate  # the statistics object it was worked out from
    a: float  # TTFT base, s
    b: float  # TTFT per uncached prompt token, s
    mean_service_s: float  # a + b·P̄: the prefill of one typical queued request
    ttft_scale: float  # p95 / mean: measured, or u · ttft spread while cold
    tpot_scale: float  # p95 / mean: measured, or u · tpot spread while cold
    warmth: float  # w
    tpot_base_s: float | None  # the observed TPOT fit's base (None: not measured) ...
    tpot_slope_s: float  # ... and slope per in-flight request
    penalty_mean_s: float  # failure penalties in the mean ...
    penalty_p95_s: float  # ... and in the p95
    uncertainty: float  # u
    cold: bool  # w < 1
    prior_slots: int | None  # the prior's batch_slots ...
    idle_tpot_s: float  # ... tpot_s ...
    doubling_running: float | None  # ... and tpot_double_running
    prefill_weight: float  # 1 − w, where the prior has batch slots (else 0): of prefill ahead

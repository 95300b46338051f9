"""Synthetic workloads: request lengths shaped like public traces, arrivals following a rate shape.

Lengths
    Inverse-CDF tables of prompt and output tokens from public traces (Azure LLM inference 2023
    code and conversation, Mooncake conversation; quantiles p1..p99 plus the maximum, read off
    the published trace files). A draw takes u ~ U(0, 1) and interpolates
    linearly between the table's points (p0 = 1 token), then multiplies by `scale` and clips
    to [min_tokens, max_tokens]. `scale` lets a scenario keep a trace's shape while shrinking it
    to what a small simulated fleet serves in seconds.

Arrivals
    A `RateShape` is a piecewise-linear rate (requests/s) through `points` [(t_s, rate)], zero
    outside them; a repeated time makes a step. Arrivals are a gamma renewal process with
    coefficient of variation `cv` (cv = 1: Poisson; cv > 1: bursty, as the Azure code trace's
    13) mapped through the rate by time rescaling: unit-mean gamma gaps in "operational time"
    u, each arrival at t = Λ⁻¹(u), Λ(t) = ∫ rate. So the expected count over any interval is
    the integral of the rate over it, whatever the burstiness.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, model_validator

from gateway.config.strict_model import StrictModel

ProfileName = Literal["code", "conversation", "rag"]
_QUANTILES = (0.0, 0.01, 0.10, 0.25, 0.50, 0.75, 0.90, 0.95, 0.99, 1.0)

# (prompt tokens, output tokens) at _QUANTILES; p0 is one token, p100 the trace's maximum.
PROFILES: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "code": (  # Azure 2023 code: long prompts, very short answers
        (1, 17, 147, 578, 1469, 2744, 5188, 7303, 7436, 7437),
        (1, 6, 7, 9, 13, 24, 55, 90, 251, 1899),
    ),
    "conversation": (  # Azure 2023 conversation
        (1, 29, 207, 396, 1020, 1189, 2734, 4083, 4142, 14050),
        (1, 16, 54, 85, 129, 395, 424, 451, 601, 1000),
    ),
    "rag": (  # Mooncake conversation: long contexts (retrieval-augmented chat)
        (1, 894, 964, 2306, 6909, 15367, 27367, 39550, 85400, 126195),
        (1, 3, 24, 156, 350, 472, 597, 698, 1119, 2000),
    ),
}


class LengthSpec(StrictModel):
    """Token counts drawn from one side (prompt or output) of a trace profile."""

    profile: ProfileName = "conversation"
    scale: float = Field(default=1.0, gt=0)
    min_tokens: int = Field(default=1, ge=1)
    max_tokens: int = Field(default=4096, ge=1)

    def sampler(self, side: Literal["prompt", "output"]) -> LengthSampler:
        points = PROFILES[self.profile][0 if side == "prompt" else 1]
        return LengthSampler(points, self.scale, self.min_tokens, self.max_tokens)


@dataclass(frozen=True, slots=True)
class LengthSampler:
    points: Sequence[float]
    scale: float
    min_tokens: int
    max_tokens: int

    def draw(self, rng: random.Random) -> int:
        u = rng.random()
        index = min(bisect.bisect_right(_QUANTILES, u), len(_QUANTILES) - 1)
        q0, q1 = _QUANTILES[index - 1], _QUANTILES[index]
        v0, v1 = self.points[index - 1], self.points[index]
        tokens = (v0 + (v1 - v0) * (u - q0) / (q1 - q0)) * self.scale
        return min(self.max_tokens, max(self.min_tokens, round(tokens)))


class RateShape(StrictModel):
    """Requests/s through `points` [(t_s, rate)], linear between them, zero outside."""

    points: list[tuple[float, float]] = Field(min_length=2)

    @model_validator(mode="after")
    def _ordered(self) -> RateShape:
        times = [t for t, _ in self.points]
        if times != sorted(times) or any(rate < 0 for _, rate in self.points):
            raise ValueError("points need non-decreasing times and non-negative rates")
        return self

    @classmethod
    def constant(cls, rate: float, start_s: float, end_s: float) -> RateShape:
        return cls(points=[(start_s, rate), (end_s, rate)])

    @classmethod
    def step(cls, before: float, after: float, at_s: float, end_s: float) -> RateShape:
        return cls(points=[(0.0, before), (at_s, before), (at_s, after), (end_s, after)])

    @classmethod
    def ramp(cls, start: float, end: float, start_s: float, end_s: float) -> RateShape:
        return cls(points=[(start_s, start), (end_s, end)])

    @classmethod
    def spike(
        cls, base: float, peak: float, at_s: float, length_s: float, end_s: float
    ) -> RateShape:
        top = at_s + length_s
        points = [(0.0, base), (at_s, base), (at_s, peak), (top, peak), (top, base), (end_s, base)]
        return cls(points=points)

    @property
    def end_s(self) -> float:
        return self.points[-1][0]

    def rate(self, t_s: float) -> float:
        for (t0, r0), (t1, r1) in itertools.pairwise(self.points):
            if t0 <= t_s < t1:
                return r0 + (r1 - r0) * (t_s - t0) / (t1 - t0)
        return 0.0

    def expected(self) -> float:
        """Λ over the whole shape: the expected number of arrivals."""
        return sum(_area(a, b) for a, b in itertools.pairwise(self.points))

    def arrivals(self, rng: random.Random, cv: float = 1.0) -> Iterator[float]:
        """Arrival times (s), increasing, as described in the module docstring."""
        shape = 1.0 / (cv * cv)
        u = rng.gammavariate(shape, 1.0 / shape)
        done = 0.0  # Λ at the start of the current segment
        for a, b in itertools.pairwise(self.points):
            area = _area(a, b)
            while u < done + area:
                yield _invert(a, b, u - done)
                u += rng.gammavariate(shape, 1.0 / shape)
            done += area


def _area(a: tuple[float, float], b: tuple[float, float]) -> float:
    (t0, r0), (t1, r1) = a, b
    return (t1 - t0) * (r0 + r1) / 2


def _invert(a: tuple[float, float], b: tuple[float, float], area: float) -> float:
    """The time τ into segment a→b where the rate's integral reaches `area`."""
    (t0, r0), (t1, r1) = a, b
    slope = (r1 - r0) / (t1 - t0)
    if abs(slope) < 1e-12:
        return t0 + area / r0
    # r0·τ + slope·τ²/2 = area  →  τ = (−r0 + sqrt(r0² + 2·slope·area)) / slope
    root = math.sqrt(max(0.0, r0 * r0 + 2 * slope * area))
    return t0 + (root - r0) / slope

"""Fault knobs shared by the simulated engine and provider, changeable at runtime.

`POST /sim/faults` merges a JSON patch into the current `Faults`; `slowdown_at_s` counts from the
moment the faults took effect (server start for the initial ones, the POST for a patch), so a
test can schedule a brownout relative to "now".
"""

from __future__ import annotations

import random
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Faults(BaseModel):
    """What to break. Fractions are 0..1.

    slowdown            multiplies step durations (engine) or drawn latencies (provider)
    slowdown_at_s       apply the slowdown only this long after the faults took effect
    error_rate          fraction of requests answered 500 before any byte
    drop_mid_stream     fraction of streams whose connection is cut after drop_after_tokens
    hang                accept every request and never answer
    status_code         answer every request (and /health) with this status
    insufficient_quota  answer 429 `insufficient_quota` (OpenAI's non-retryable quota error)
    """

    model_config = ConfigDict(extra="forbid")

    slowdown: float = Field(default=1.0, gt=0)
    slowdown_at_s: float | None = Field(default=None, ge=0)
    error_rate: float = Field(default=0.0, ge=0, le=1)
    drop_mid_stream: float = Field(default=0.0, ge=0, le=1)
    drop_after_tokens: int = Field(default=3, ge=0)
    hang: bool = False
    status_code: int | None = Field(default=None, ge=400, le=599)
    insufficient_quota: bool = False


class FaultState:
    """The current faults plus a seeded random source; the caller passes the time."""

    def __init__(self, faults: Faults, *, now_s: float, seed: int | None = None) -> None:
        self.faults = faults
        self._since_s = now_s
        self._rng = random.Random(seed)

    def update(self, patch: dict[str, Any], *, now_s: float) -> Faults:
        merged = self.faults.model_dump() | patch
        self.faults = Faults.model_validate(merged)
        self._since_s = now_s
        return self.faults

    def slowdown(self, now_s: float) -> float:
        start = self.faults.slowdown_at_s
        if start is not None and now_s - self._since_s < start:
            return 1.0
        return self.faults.slowdown

    def inject_error(self) -> bool:
        rate = self.faults.error_rate
        return rate > 0 and self._rng.random() < rate

    def drop_after(self) -> int | None:
        """Tokens to send before cutting this stream, or None to let it finish."""
        rate = self.faults.drop_mid_stream
        if rate > 0 and self._rng.random() < rate:
            return self.faults.drop_after_tokens
        return None

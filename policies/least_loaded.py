"""Least loaded: fewest requests in flight first, engine queue included when it is known.

Load = gateway-wide in-flight leases + the engine's waiting queue (when scraped and fresh).
Endpoints with a `max_concurrency` are compared by utilisation (load / max_concurrency) so a
large pool is not starved by a small one. Ties are broken at random through the injected rng.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from policies.base import EndpointSnapshot, Ranking, RouteRequest


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Literal["least_loaded"] = "least_loaded"


def load(snapshot: EndpointSnapshot) -> float:
    queued = snapshot.engine.waiting if snapshot.engine and snapshot.engine.waiting else 0.0
    total = snapshot.in_flight + queued
    if snapshot.max_concurrency:
        return total / snapshot.max_concurrency
    return total


class LeastLoaded:
    name: ClassVar[str] = "least_loaded"

    def __init__(self, params: Params) -> None:
        self.params = params

    def rank(
        self, request: RouteRequest, candidates: Sequence[EndpointSnapshot], rng: random.Random
    ) -> Ranking:
        keyed = [(load(c), rng.random(), c) for c in candidates]
        keyed.sort(key=lambda item: (item[0], item[1]))
        return Ranking(endpoints=tuple(c for _, _, c in keyed), reason="least_loaded")

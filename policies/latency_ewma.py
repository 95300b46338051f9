"""Lowest recent latency, the way LiteLLM's latency-based routing works (a baseline).

Score = the endpoint's recent mean TTFT when the request streams, else its mean end-to-end
latency (`LatencyEstimate.ttft_mean_s` / `e2e_mean_s`, the store's rolling window). Ignores
queues, prompt length and SLO classes, as LiteLLM does.

Order: endpoints with no latency yet come first (so they get measured), in random order; then
the endpoints whose score is within `buffer_fraction` of the lowest (LiteLLM's
`lowest_latency_buffer`, default 0), in random order; then the rest, lowest score first.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from policies.base import EndpointSnapshot, Ranking, RouteRequest


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Literal["latency_ewma"] = "latency_ewma"
    buffer_fraction: float = Field(default=0.0, ge=0)


def recent_latency_s(snapshot: EndpointSnapshot, stream: bool) -> float | None:
    stats = snapshot.latency
    return stats.ttft_mean_s if stream else stats.e2e_mean_s


class LatencyEwma:
    name: ClassVar[str] = "latency_ewma"

    def __init__(self, params: Params) -> None:
        self.params = params

    def rank(
        self, request: RouteRequest, candidates: Sequence[EndpointSnapshot], rng: random.Random
    ) -> Ranking:
        unseen: list[EndpointSnapshot] = []
        seen: list[tuple[float, EndpointSnapshot]] = []
        for snapshot in candidates:
            latency_s = recent_latency_s(snapshot, request.stream)
            if latency_s is None:
                unseen.append(snapshot)
            else:
                seen.append((latency_s, snapshot))
        rng.shuffle(unseen)
        return Ranking(endpoints=(*unseen, *self._by_latency(seen, rng)), reason="latency")

    def _by_latency(
        self, seen: list[tuple[float, EndpointSnapshot]], rng: random.Random
    ) -> list[EndpointSnapshot]:
        if not seen:
            return []
        seen.sort(key=lambda item: item[0])
        limit_s = seen[0][0] * (1 + self.params.buffer_fraction)
        near = [s for latency_s, s in seen if latency_s <= limit_s]
        rng.shuffle(near)
        return [*near, *(s for latency_s, s in seen if latency_s > limit_s)]

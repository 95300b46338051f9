"""Round robin: rotate through the candidates by the request's sequence number.

Rotation comes from `RouteRequest.seq` (a counter the orchestrator assigns), so the policy holds
no state and the same inputs always give the same ranking. The rest of the rotation is the
failover order.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from policies.base import EndpointSnapshot, Ranking, RouteRequest


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Literal["round_robin"] = "round_robin"


class RoundRobin:
    name: ClassVar[str] = "round_robin"

    def __init__(self, params: Params) -> None:
        self.params = params

    def rank(
        self, request: RouteRequest, candidates: Sequence[EndpointSnapshot], rng: random.Random
    ) -> Ranking:
        ordered = sorted(candidates, key=lambda c: c.endpoint_id)
        if not ordered:
            return Ranking(endpoints=())
        start = request.seq % len(ordered)
        return Ranking(endpoints=tuple(ordered[start:] + ordered[:start]), reason="rotation")

"""Power of two choices: sample two candidates at random, send to the less loaded one.

Load is `least_loaded.load` (gateway-wide in-flight plus the engine's waiting queue, as a
fraction of `max_concurrency` when one is set). The two sampled endpoints come first, less
loaded first (the rng breaks a tie); the other candidates follow, least loaded first, as the
failover order. Sampling two instead of scanning all avoids the herd that forms when every
gateway replica sends to the same least-loaded endpoint from the same stale view.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from policies.base import EndpointSnapshot, Ranking, RouteRequest
from policies.least_loaded import load


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Literal["power_of_two"] = "power_of_two"


class PowerOfTwo:
    name: ClassVar[str] = "power_of_two"

    def __init__(self, params: Params) -> None:
        self.params = params

    def rank(
        self, request: RouteRequest, candidates: Sequence[EndpointSnapshot], rng: random.Random
    ) -> Ranking:
        if len(candidates) < 2:
            return Ranking(endpoints=tuple(candidates), reason="power_of_two")
        i, j = rng.sample(range(len(candidates)), 2)
        first, second = candidates[i], candidates[j]
        if load(second) < load(first):  # on a tie the sampled order, itself random, stands
            first, second = second, first
        rest = sorted((c for k, c in enumerate(candidates) if k not in (i, j)), key=load)
        return Ranking(endpoints=(first, second, *rest), reason="power_of_two")

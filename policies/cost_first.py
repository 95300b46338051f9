"""Cheapest first (a baseline): the request's price on each endpoint, ties by load.

Cost = prompt tokens at the endpoint's input price + output tokens (max_tokens, else
`default_output_tokens`) at its output price. Equal costs (for example several self-hosted
replicas priced the same) are ordered by `least_loaded.load`, then at random.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from policies.base import EndpointSnapshot, Ranking, RouteRequest
from policies.least_loaded import load


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: Literal["cost_first"] = "cost_first"
    default_output_tokens: int = Field(default=256, ge=1)


class CostFirst:
    name: ClassVar[str] = "cost_first"

    def __init__(self, params: Params) -> None:
        self.params = params

    def rank(
        self, request: RouteRequest, candidates: Sequence[EndpointSnapshot], rng: random.Random
    ) -> Ranking:
        output_tokens = request.max_tokens or self.params.default_output_tokens
        keyed = [
            (c.cost(request.prompt_tokens, output_tokens), load(c), rng.random(), c)
            for c in candidates
        ]
        keyed.sort(key=lambda item: item[:3])
        return Ranking(endpoints=tuple(item[3] for item in keyed), reason="cheapest")

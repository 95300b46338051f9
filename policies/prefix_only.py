"""Prefix only: the Kubernetes inference gateway's default scoring, as a baseline to compare.

Method (GIE `pkg/epp/config/loader/defaults.go`, scorers weighted and summed, highest first):
    prefix  = cached / P        the share of the prompt the endpoint is predicted to hold
                                (`RouteRequest.cached_tokens`, from the gateway's prefix index)
    queue   = (Q_max − Q) / (Q_max − Q_min) over the candidates, 1 when all are equal;
              Q = in-flight leases + the engine's waiting queue (as least_loaded counts them)
    kv      = 1 − kv_usage      (0.5 when the engine's KV use is unknown)
    score   = 3·prefix + 2·queue + 2·kv
Ties break at random through the injected rng. No SLO, no cost and no latency model: an
endpoint holding the prefix wins until its queue and KV scores lose more than 3·prefix, whatever
that costs in seconds. Parameters: the three weights.
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
    name: Literal["prefix_only"] = "prefix_only"
    prefix_weight: float = Field(default=3.0, ge=0)
    queue_weight: float = Field(default=2.0, ge=0)
    kv_weight: float = Field(default=2.0, ge=0)


class PrefixOnly:
    name: ClassVar[str] = "prefix_only"

    def __init__(self, params: Params) -> None:
        self.params = params
        self._weights = (params.prefix_weight, params.queue_weight, params.kv_weight)

    def rank(
        self, request: RouteRequest, candidates: Sequence[EndpointSnapshot], rng: random.Random
    ) -> Ranking:
        if not candidates:
            return Ranking(endpoints=())
        # the weights read once: a pydantic attribute costs several times a local
        prefix_weight, queue_weight, kv_weight = self._weights
        queues = [load(c) for c in candidates]
        low, high = min(queues), max(queues)
        spread = high - low
        cached, prompt = request.cached_tokens, max(1, request.prompt_tokens)
        keyed = []  # (−score, random tie, index): plain tuples sort fastest
        for index, (snapshot, queue) in enumerate(zip(candidates, queues, strict=True)):
            prefix = min(1.0, cached.get(snapshot.endpoint_id, 0.0) / prompt) if cached else 0.0
            queue_score = (high - queue) / spread if spread else 1.0
            score = prefix_weight * prefix + queue_weight * queue_score
            score += kv_weight * kv_score(snapshot)
            keyed.append((-score, rng.random(), index))
        keyed.sort()
        first = candidates[keyed[0][2]]
        hit = bool(cached) and cached.get(first.endpoint_id, 0.0) > 0
        order = tuple([candidates[index] for _, _, index in keyed])
        return Ranking(order, reason="prefix_hit" if hit else "prefix_miss")


def kv_score(snapshot: EndpointSnapshot) -> float:
    engine = snapshot.engine
    usage = engine.kv_usage if engine is not None else None
    return 0.5 if usage is None else 1.0 - min(1.0, max(0.0, usage))

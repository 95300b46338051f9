"""The one name -> implementation table. Add a policy here and nowhere else."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from policies import (
    cost_first,
    latency_ewma,
    least_loaded,
    power_of_two,
    prefix_only,
    round_robin,
    slo_aware,
)
from policies.base import RoutingPolicy

POLICIES: dict[str, tuple[type[Any], type[Any]]] = {
    round_robin.RoundRobin.name: (round_robin.Params, round_robin.RoundRobin),
    least_loaded.LeastLoaded.name: (least_loaded.Params, least_loaded.LeastLoaded),
    power_of_two.PowerOfTwo.name: (power_of_two.Params, power_of_two.PowerOfTwo),
    latency_ewma.LatencyEwma.name: (latency_ewma.Params, latency_ewma.LatencyEwma),
    cost_first.CostFirst.name: (cost_first.Params, cost_first.CostFirst),
    slo_aware.SloAware.name: (slo_aware.Params, slo_aware.SloAware),
    prefix_only.PrefixOnly.name: (prefix_only.Params, prefix_only.PrefixOnly),
}

PolicyParams = Annotated[
    round_robin.Params
    | least_loaded.Params
    | power_of_two.Params
    | latency_ewma.Params
    | cost_first.Params
    | slo_aware.Params
    | prefix_only.Params,
    Field(discriminator="name"),
]


def build(params: Any) -> RoutingPolicy:
    _, cls = POLICIES[params.name]
    policy: RoutingPolicy = cls(params)
    return policy

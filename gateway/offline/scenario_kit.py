"""The building blocks the catalogue's scenarios share (gateway/offline/scenarios.py and the
modules it gathers): the SLO classes, chat lengths, and how a hosted provider and the tenants
are declared."""

from __future__ import annotations

from gateway.config.settings import SloClassConfig
from gateway.offline.scenario import ProviderSpec, ScenarioTenant
from gateway.offline.workload import LengthSpec
from gateway.sim.fleet import MemberPrice
from gateway.sim.provider import ProviderParams

CLASSES = {
    "interactive": SloClassConfig(ttft_ms=600, tpot_ms=60, priority=10, sheddable=False),
    "rag": SloClassConfig(ttft_ms=2500, tpot_ms=80, priority=5, sheddable=False),
    "batch": SloClassConfig(deadline_ms=60000, priority=0, sheddable=True),
}
CHAT_PROMPT = LengthSpec(profile="conversation", scale=0.5, max_tokens=2048)
CHAT_OUTPUT = LengthSpec(profile="conversation", scale=0.5, max_tokens=256)


def provider(
    member_id: str, ttft_s: float, price_in: float, price_out: float, limit: int = 16
) -> ProviderSpec:
    params = ProviderParams(
        model="llama3-8b-hosted",
        api_key=f"sk-{member_id}",
        ttft_median_s=ttft_s,
        max_concurrency=limit,
    )
    return ProviderSpec(
        id=member_id,
        params=params,
        price=MemberPrice(input_per_1m=price_in, output_per_1m=price_out),
    )


def scenario_tenants(**allowed: list[str]) -> dict[str, ScenarioTenant]:
    return {name: ScenarioTenant(allowed_classes=classes) for name, classes in allowed.items()}

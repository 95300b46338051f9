"""A scenario that measures fair share inside a class: one tenant's burst beside a quiet one.

    noisy_neighbour   two tenants of one class (`chat`) on two engines with small batches.
                      Both hold chat sessions over shared system prompts (prefix reuse) at about
                      the same steady rate; from 10 s to 20 s the noisy tenant also fires
                      one-off requests at `BURST_RATE` (about 8x its steady rate), which
                      saturates the fleet. Fair share should keep the quiet tenant's attainment
                      where it is without the noisy one, give the noisy one the rest, and keep
                      the sessions' prefix locality.
`benchmarks/noisy_neighbour.py` runs it three ways (the quiet tenant alone, first come first
served, fair share) and tables each tenant's attainment, served tokens, queue waits and the
cached share.
"""

from __future__ import annotations

from gateway.config.settings import SloClassConfig
from gateway.offline.prefix_scenarios import PrefixScenario, Sessions
from gateway.offline.scenario import EngineSpec, ScenarioTenant, Traffic
from gateway.offline.workload import LengthSpec, RateShape
from gateway.sim.engine import EngineServerParams

QUIET, NOISY = "quiet", "noisy"
BURST_S = (10.0, 20.0)
BURST_RATE = 12.0  # one-off requests/s of the noisy tenant during the burst
END_S = 30.0
_CLASSES = {"chat": SloClassConfig(ttft_ms=1500, tpot_ms=100, priority=10, sheddable=False)}


def _sessions(tenant: str) -> Sessions:
    """About 1.5 turns a second for the whole run: 12 sessions of 8 turns, 4 s apart."""
    return Sessions(
        tenant=tenant,
        slo_class="chat",
        sessions=12,
        start_within_s=8,
        turns=8,
        think_s=4,
        system_prompts=4,
        system_tokens=600,
        user=LengthSpec(profile="conversation", scale=0.1, max_tokens=200),
        output=LengthSpec(profile="conversation", scale=0.4, max_tokens=160),
    )


def noisy_neighbour() -> PrefixScenario:
    start, end = BURST_S
    burst = Traffic(
        tenant=NOISY,
        slo_class="chat",
        shape=RateShape.constant(BURST_RATE, start, end),
        prompt=LengthSpec(profile="conversation", scale=0.5, max_tokens=2048),
        output=LengthSpec(profile="conversation", scale=0.4, max_tokens=160),
    )
    engines = [
        EngineSpec(id=f"vllm-{i}", params=EngineServerParams(max_num_seqs=8)) for i in (1, 2)
    ]
    return PrefixScenario(
        name="noisy_neighbour",
        description=(
            "Two tenants of one class in chat sessions on two small engines; the noisy one "
            f"adds {BURST_RATE:g} one-off requests/s from {start:g} s to {end:g} s."
        ),
        duration_s=END_S,
        drain_s=30,
        classes=_CLASSES,
        tenants={t: ScenarioTenant(allowed_classes=["chat"]) for t in (QUIET, NOISY)},
        traffic=[burst],
        engines=engines,
        sessions=[_sessions(QUIET), _sessions(NOISY)],
        max_users=200,
    )

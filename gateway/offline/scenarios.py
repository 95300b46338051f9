"""The scenario catalogue: what `slo-gateway loadtest` and `slo-gateway simulate` run by name.

Every scenario is bounded (tens of seconds, `max_users` concurrent streams at most) and sized
for the small simulated fleet on a shared CPU; lengths keep the shape of the public traces,
scaled down (`LengthSpec.scale`). The pass criteria are the scenario's `checks`; thresholds are
generous where a noisy machine moves the numbers, exact where the gateway promises exactness
(tenant limits).

    chat          interactive chat, constant rate
    rag           long-prompt retrieval-augmented chat (Mooncake-shaped prompts)
    batch_flood   a batch flood on top of chat: interactive keeps its SLO, batch is shed/queued
    multi_tenant  three weighted tenants plus one over its request limit: fairness, exact limits
    spike         a 4x burst: recovery time, no retry storm
    outage        a provider down (503) then a 429 storm on the other: failover, nothing lost
    kv_ramp       a ramp that fills the engines' KV cache: admission acts before preemption
    smoke         a short mix for CI (generous thresholds)
    fleet20       the simulator benchmark: 16 engines and 4 providers, ~100k requests (offline)
    sessions_slow, sessions_fast, sessions_rag   prefix reuse: multi-turn chat sessions, RAG
                  documents (prefix_scenarios.py)
    sessions_rag_engines  sessions_rag without its hosted provider (the engines' reference)
    reaction      a 2.5x burst, then an engine slowed 3x (gateway/offline/reaction_scenarios.py)
    noisy_neighbour  two tenants of one class, one bursting about 8x: fair share inside a class
                  (gateway/offline/fairness_scenarios.py)
    overload      chat on the engines alone ramped to twice what they serve within the SLO,
                  then back: goodput at SLO per 10 s, refusals, late answers
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.config.settings import TenantLimits
from gateway.offline.fairness_scenarios import noisy_neighbour
from gateway.offline.prefix_scenarios import (
    sessions_fast,
    sessions_rag,
    sessions_rag_engines,
    sessions_slow,
)
from gateway.offline.reaction_scenarios import reaction
from gateway.offline.scenario import (
    Check,
    EngineSpec,
    FaultEvent,
    Scenario,
    ScenarioTenant,
    Traffic,
)
from gateway.offline.scenario_kit import (
    CHAT_OUTPUT,
    CHAT_PROMPT,
    CLASSES,
)
from gateway.offline.scenario_kit import (
    provider as _provider,
)
from gateway.offline.scenario_kit import (
    scenario_tenants as _tenants,
)
from gateway.offline.workload import LengthSpec, RateShape
from gateway.sim.engine import EngineServerParams
from gateway.sim.fleet import MemberPrice
from policies.admission import AdmissionParams

BATCH_OUTPUT = LengthSpec(profile="conversation", scale=1.0, min_tokens=32, max_tokens=400)
RAG_PROMPT = LengthSpec(profile="rag", scale=0.15, min_tokens=256, max_tokens=6000)
RAG_OUTPUT = LengthSpec(profile="rag", scale=0.25, max_tokens=256)
_SLOW = {
    "step_base_s": 0.03,
    "per_seq_s": 0.0006,
    "per_kv_token_s": 6e-7,
    "prefill_per_token_s": 0.0005,
    "prefill_quadratic_s": 4e-8,
}


def standard_fleet(max_num_seqs: int = 64, provider_limit: int = 16) -> dict[str, Any]:
    """Two engines (one ~2x slower and cheaper) and two providers (fast/dear, slow/cheap);
    smaller batches and provider limits make a fleet that saturates at lower load."""
    return {
        "engines": [
            EngineSpec(
                id="vllm-fast",
                params=EngineServerParams(max_num_seqs=max_num_seqs),
                price=MemberPrice(input_per_1m=0.05, output_per_1m=0.10),
            ),
            EngineSpec(
                id="vllm-slow",
                params=EngineServerParams(**_SLOW, max_num_seqs=max_num_seqs),
                price=MemberPrice(input_per_1m=0.03, output_per_1m=0.06),
            ),
        ],
        "providers": [
            _provider("provider-fast", 0.12, 0.20, 0.60, provider_limit),
            _provider("provider-cheap", 0.35, 0.10, 0.30, provider_limit),
        ],
    }


# Each class's prompt and answer lengths, so a scenario names only who sends how much.
_LENGTHS: dict[str, tuple[LengthSpec, LengthSpec]] = {
    "interactive": (CHAT_PROMPT, CHAT_OUTPUT),
    "rag": (RAG_PROMPT, RAG_OUTPUT),
    "batch": (CHAT_PROMPT, BATCH_OUTPUT),
}


def _traffic(slo_class: str, shape: RateShape, tenant: str) -> Traffic:
    prompt, output = _LENGTHS[slo_class]
    return Traffic(tenant=tenant, slo_class=slo_class, shape=shape, prompt=prompt, output=output)


def _chat(rate: float, end_s: float, tenant: str = "app", start_s: float = 0.0) -> Traffic:
    return _traffic("interactive", RateShape.constant(rate, start_s, end_s), tenant)


def _rag(rate: float, end_s: float, tenant: str) -> Traffic:
    return _traffic("rag", RateShape.constant(rate, 0, end_s), tenant)


def _batch(shape: RateShape, tenant: str = "jobs") -> Traffic:
    return _traffic("batch", shape, tenant)


def _check(
    metric: str, op: str, value: float, slo_class: str | None = None, tenant: str | None = None
) -> Check:
    return Check.model_validate(
        {"metric": metric, "op": op, "value": value, "slo_class": slo_class, "tenant": tenant}
    )


def chat() -> Scenario:
    return Scenario(
        name="chat",
        description="Interactive chat at a steady 4 req/s on the standard fleet.",
        duration_s=20,
        classes=CLASSES,
        tenants=_tenants(app=["interactive"]),
        traffic=[_chat(4.0, 20)],
        **standard_fleet(),
        checks=[_check("attainment", ">=", 0.9, "interactive"), _check("error_rate", "<=", 0.01)],
    )


def rag() -> Scenario:
    return Scenario(
        name="rag",
        description="Long-prompt RAG (Mooncake-shaped prompts up to 6k tokens) at 1.5 req/s.",
        duration_s=20,
        classes=CLASSES,
        tenants=_tenants(search=["rag"]),
        traffic=[_rag(1.5, 20, "search")],
        **standard_fleet(),
        checks=[_check("attainment", ">=", 0.8, "rag"), _check("error_rate", "<=", 0.01)],
    )


def batch_flood() -> Scenario:
    flood = RateShape(points=[(6.0, 8.0), (16.0, 8.0)])
    return Scenario(
        name="batch_flood",
        description=(
            "Chat at 3 req/s; from 6 s to 16 s a batch tenant floods 8 req/s of long answers "
            "onto a fleet with small batches (8 sequences) and provider limits (6)."
        ),
        duration_s=22,
        classes=CLASSES,
        tenants=_tenants(app=["interactive"], jobs=["batch"]),
        traffic=[_chat(3.0, 22), _batch(flood)],
        **standard_fleet(max_num_seqs=8, provider_limit=6),
        max_users=200,
        checks=[
            _check("attainment", ">=", 0.85, "interactive"),
            _check("shed_rate", "<=", 0.0, "interactive"),
            _check("error_rate", "<=", 0.02),
        ],
    )


def multi_tenant() -> Scenario:
    greedy = ScenarioTenant(
        allowed_classes=["interactive"], limits=TenantLimits(requests_per_min=20)
    )
    tenants = _tenants(gold=["interactive"], silver=["interactive"], bronze=["interactive"]) | {
        "greedy": greedy
    }
    return Scenario(
        name="multi_tenant",
        description=(
            "Tenants weighted 6/2/1 (1.8, 0.6, 0.3 req/s) plus one sending 2 req/s "
            "against a limit of 20 requests per minute."
        ),
        duration_s=20,
        classes=CLASSES,
        tenants=tenants,
        traffic=[
            _chat(1.8, 20, "gold"),
            _chat(0.6, 20, "silver"),
            _chat(0.3, 20, "bronze"),
            _chat(2.0, 20, "greedy"),
        ],
        **standard_fleet(),
        admission=AdmissionParams(),
        checks=[
            _check("admitted", "<=", 20, tenant="greedy"),
            _check("shed_rate", ">=", 0.4, tenant="greedy"),
            *(_check("attainment", ">=", 0.85, tenant=t) for t in ("gold", "silver", "bronze")),
            _check("shed_rate", "<=", 0.0, tenant="gold"),
        ],
    )


def spike() -> Scenario:
    shape = RateShape.spike(base=2.0, peak=8.0, at_s=8.0, length_s=4.0, end_s=24.0)
    return Scenario(
        name="spike",
        description="Chat at 2 req/s with a 4x spike from 8 s to 12 s.",
        duration_s=24,
        classes=CLASSES,
        tenants=_tenants(app=["interactive"]),
        traffic=[_traffic("interactive", shape, "app")],
        **standard_fleet(),
        admission=AdmissionParams(),
        recovery_from_s=12.0,
        window_s=2.0,
        checks=[
            _check("recovery_s", "<=", 6.0),
            _check("attempts_ratio", "<=", 1.1),
            _check("error_rate", "<=", 0.02),
            _check("attainment", ">=", 0.7, "interactive"),
        ],
    )


def outage() -> Scenario:
    faults = [
        FaultEvent(at_s=6.0, member="provider-fast", patch={"status_code": 503}),
        FaultEvent(at_s=12.0, member="provider-cheap", patch={"status_code": 429}),
        FaultEvent(at_s=18.0, member="provider-fast", patch={"status_code": None}),
        FaultEvent(at_s=18.0, member="provider-cheap", patch={"status_code": None}),
    ]
    return Scenario(
        name="outage",
        description=(
            "Chat at 4 req/s; provider-fast answers 503 from 6 s, provider-cheap 429 "
            "from 12 s; both are back at 18 s."
        ),
        duration_s=24,
        classes=CLASSES,
        tenants=_tenants(app=["interactive"]),
        traffic=[_chat(4.0, 24)],
        **standard_fleet(),
        faults=faults,
        recovery_from_s=6.0,
        checks=[
            _check("error_rate", "<=", 0.01),
            _check("attainment", ">=", 0.8, "interactive"),
            _check("recovery_s", "<=", 2.0),
            _check("attempts_ratio", "<=", 1.5),
        ],
    )


def kv_ramp() -> Scenario:
    small_kv = EngineServerParams(num_gpu_blocks=512, max_model_len=4096)
    engines = [
        EngineSpec(
            id=f"vllm-{i}", params=small_kv, price=MemberPrice(input_per_1m=0.05, output_per_1m=0.1)
        )
        for i in (1, 2)
    ]
    batch = _batch(RateShape.ramp(0.5, 6.0, 0.0, 20.0))
    return Scenario(
        name="kv_ramp",
        description=(
            "Batch ramping 0.5 -> 6 req/s plus chat at 1 req/s on two engines with "
            "8k-token KV pools."
        ),
        duration_s=20,
        classes=CLASSES,
        tenants=_tenants(app=["interactive"], jobs=["batch"]),
        traffic=[_chat(1.0, 20), batch],
        engines=engines,
        admission=AdmissionParams(),
        checks=[
            _check("preemptions", "<=", 0),
            _check("shed_rate", ">=", 0.05, "batch"),
            _check("attainment", ">=", 0.8, "interactive"),
        ],
    )


def smoke() -> Scenario:
    return Scenario(
        name="smoke",
        description="CI smoke: 12 s of chat (2 req/s) and RAG (0.5 req/s); generous thresholds.",
        duration_s=12,
        drain_s=15,
        classes=CLASSES,
        tenants=_tenants(app=["interactive", "rag"]),
        traffic=[_chat(2.0, 12), _rag(0.5, 12, "app")],
        **standard_fleet(),
        max_users=24,
        checks=[
            _check("success_rate", ">=", 0.9),
            _check("attainment", ">=", 0.5, "interactive"),
            _check("attainment", ">=", 0.4, "rag"),
        ],
    )


OVERLOAD_KNEE_RPS = 3.0  # about what the two standard engines serve within the SLO


def overload() -> Scenario:
    """The knee's rate for 20 s, a ramp to twice it by 30 s, held to 60 s, then back to the
    knee's: goodput at SLO under 2x load (`met` per window) against the first windows'."""
    knee, peak = OVERLOAD_KNEE_RPS, 2 * OVERLOAD_KNEE_RPS
    points = [(0.0, knee), (20.0, knee), (30.0, peak), (60.0, peak), (60.0, knee), (90.0, knee)]
    return Scenario(
        name="overload",
        description=(
            f"Chat at {knee:g} req/s on the two standard engines, no provider; ramped to "
            f"{peak:g} req/s (20-30 s), held to 60 s, then back to {knee:g} req/s."
        ),
        duration_s=90,
        classes=CLASSES,
        tenants=_tenants(app=["interactive"]),
        traffic=[_traffic("interactive", RateShape(points=points), "app")],
        engines=standard_fleet()["engines"],
        recovery_from_s=60.0,
        window_s=10.0,
    )


def fleet20() -> Scenario:
    engines = [
        EngineSpec(id=f"vllm-{i:02d}", price=MemberPrice(input_per_1m=0.05, output_per_1m=0.10))
        for i in range(16)
    ]
    providers = [_provider(f"provider-{i}", 0.15 + 0.1 * i, 0.2, 0.6, limit=32) for i in range(4)]
    code = Traffic(
        tenant="ide",
        slo_class="interactive",
        shape=RateShape.constant(30, 0, 1000),
        cv=3.0,
        prompt=LengthSpec(profile="code", scale=0.5, max_tokens=4096),
        output=LengthSpec(profile="code", max_tokens=512),
    )
    return Scenario(
        name="fleet20",
        description="Simulator benchmark: 100 req/s for 1000 s on 16 engines and 4 providers.",
        duration_s=1000,
        classes=CLASSES,
        tenants=_tenants(app=["interactive"], ide=["interactive"]),
        traffic=[_chat(70, 1000), code],
        engines=engines,
        providers=providers,
        admission=AdmissionParams(),
    )


SCENARIOS: dict[str, Callable[[], Scenario]] = {
    "chat": chat,
    "rag": rag,
    "batch_flood": batch_flood,
    "multi_tenant": multi_tenant,
    "spike": spike,
    "outage": outage,
    "kv_ramp": kv_ramp,
    "smoke": smoke,
    "fleet20": fleet20,
    "sessions_slow": sessions_slow,
    "sessions_fast": sessions_fast,
    "sessions_rag": sessions_rag,
    "sessions_rag_engines": sessions_rag_engines,
    "reaction": reaction,
    "noisy_neighbour": noisy_neighbour,
    "overload": overload,
}

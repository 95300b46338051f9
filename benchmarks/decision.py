"""Cost of one routing decision over 20 endpoints: admission + policy, µs at p50 and p99.

Run: .venv/bin/python -m benchmarks.decision [--request-cpu-us US]

The prefix case ("+ prefix") adds what a request with an 8,000-token chat prompt costs on top:
the index walk over the 20 endpoints (gateway/core/prefix_index.py; each conversation sits on
two of them, and all hold the shared system prompt) and the predicted cached tokens put on the
request; then the same decision. Hashing the prompt into its chain
(gateway/core/prefix_chain.py) happens once per request before admission, like the token
estimate, and is timed on its own line ("+ hashing" adds it to the decision).

A decision here is what the gateway does per request once snapshots are built: its own
`AdmissionControl.admit` (gateway/core/admission_control.py: each endpoint's saturation state
moved on by hysteresis and the state this request's KV footprint would find it in, one pass;
the admission decision; the endpoints with headroom for the class), then the policy's ranking.
Every registered policy is timed on the same mixed fleet (vLLM replicas with gauges of various
ages, hosted providers, cold endpoints) and requests; the ratio column compares with
round_robin in the same run.

Target: a decision costs at most 3% of a request's CPU at 20 endpoints. A request's CPU is the
gateway's "CPU / request" in the relay benchmark (`python -m benchmarks.relay --systems
gateway-memory --phases closed64`, non-streamed) on the same host; pass it as
`--request-cpu-us` and each row gets its share.

The fleet's snapshots, and so their `LatencyEstimate`s, stay the same for every decision, as the
gateway's shared view hands the same statistics objects to every request between two refreshes
(0.1 s): slo_aware's per-statistics memo (`policies/estimate.py`) hits here as it does under
load, and misses once per endpoint and refresh in a live gateway.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from gateway.core.admission_control import AdmissionControl, Waiting
from gateway.core.decision_pipeline import with_cached
from gateway.core.prefix_chain import chain_of
from gateway.core.prefix_index import PrefixIndex
from gateway.state.background import run_to_completion
from gateway.state.memory_store import MemoryStatsStore
from policies.admission import AdmissionParams
from policies.base import EndpointSnapshot, EngineSignals, LatencyEstimate, RouteRequest, SloTarget
from policies.registry import POLICIES, build

ENDPOINTS = 20
DECISIONS = 3000
ROUNDS = 5
RANKED: list[float] = []  # endpoints passed to rank, mean per decision
TARGET_SHARE = 0.03  # of a request's CPU
CLASSES = (
    SloTarget("interactive", ttft_s=0.5, tpot_s=0.05, priority=10),
    SloTarget("standard", ttft_s=2.0),
    SloTarget("batch", sheddable=True),
)


def fleet(rng: random.Random) -> list[EndpointSnapshot]:
    return [_endpoint(f"e{i}", rng) for i in range(ENDPOINTS)]


def _endpoint(endpoint_id: str, rng: random.Random) -> EndpointSnapshot:
    vllm = rng.random() < 0.7
    samples = rng.choice([0, 200, 400])
    latency = LatencyEstimate(
        samples=samples,
        errors=samples // 50,
        throttled=samples // 100,
        ttft_mean_s=0.2 if samples else None,
        ttft_base_s=rng.uniform(0.02, 0.3) if samples else None,
        ttft_per_token_s=rng.uniform(2e-5, 2e-4) if samples else None,
        ttft_p95_s=0.5 if samples else None,
        tpot_mean_s=0.02 if samples else None,
        tpot_base_s=0.015 if samples else None,
        tpot_per_in_flight_s=1e-4 if samples else None,
        tpot_p95_s=0.03 if samples else None,
        e2e_mean_s=3.0 if samples else None,
    )
    # mostly below the saturation thresholds, so the policy ranks (nearly) all 20
    engine = EngineSignals(
        waiting=rng.randint(0, 5),
        running=rng.randint(0, 64),
        kv_usage=rng.uniform(0.0, 0.85),
        age_s=rng.uniform(0, 5),
    )
    return EndpointSnapshot(
        endpoint_id=endpoint_id,
        kind="vllm" if vllm else "openai",
        in_flight=rng.randint(0, 40),
        max_concurrency=None if vllm else 32,
        input_price_per_1m=0.0 if vllm else 0.5,
        output_price_per_1m=0.0 if vllm else 1.5,
        engine=engine if vllm else None,
        latency=latency,
    )


def requests(rng: random.Random) -> list[RouteRequest]:
    return [
        RouteRequest(
            f"r{i}",
            "m",
            "t",
            rng.choice(CLASSES),
            prompt_tokens=rng.choice([50, 800, 6000]),
            max_tokens=rng.choice([None, 128, 1024]),
            stream=rng.random() < 0.7,
            seq=i,
        )
        for i in range(DECISIONS)
    ]


def default_admission() -> AdmissionControl[Waiting]:
    """The gateway's admission with default parameters and no tenant limits: `admit` reads no
    store (tenant limits are a separate call, `tenant_ticket`)."""
    return AdmissionControl(AdmissionParams(), {}, MemoryStatsStore(), run_to_completion, 30.0)


def time_decisions(
    name: str | None, endpoints: list[EndpointSnapshot], batch: list[RouteRequest]
) -> list[float]:
    """µs per decision: the gateway's admission and (unless None) the policy's ranking."""
    admission = default_admission()
    policy = build(POLICIES[name][0]()) if name else None
    rng = random.Random(1)
    costs_us = []
    ranked = 0
    for request in batch:
        started = time.perf_counter_ns()
        _, usable = admission.admit(request, endpoints, 0.0)
        if policy is not None:
            policy.rank(request, usable or endpoints, rng)
        costs_us.append((time.perf_counter_ns() - started) / 1000)
        ranked += len(usable or endpoints)
    RANKED.append(ranked / len(batch))
    return costs_us


PREFIX_PROMPT_TOKENS = 8000
PREFIX_SESSIONS = 16
PREFIXED = ("round_robin", "slo_aware", "prefix_only")
HASHING_US: list[float] = []  # hashing each prefix case's prompt into its chain


def sessions(rng: random.Random) -> list[dict[str, object]]:
    """Chat bodies of about 8,000 tokens (32,000 characters): a shared 4,000-character system
    prompt, then the turns of one of `PREFIX_SESSIONS` conversations."""
    system = {"role": "system", "content": "Follow the house style. " * 170}
    bodies: list[dict[str, object]] = []
    for number in range(PREFIX_SESSIONS):
        turns: list[dict[str, str]] = [system]
        while sum(len(t["content"]) for t in turns) < 4 * PREFIX_PROMPT_TOKENS:
            role = "user" if len(turns) % 2 else "assistant"
            turns.append(
                {"role": role, "content": f"session {number} says " * rng.randint(40, 200)}
            )
        bodies.append({"model": "m", "messages": turns})
    return bodies


def seeded_index(endpoints: list[EndpointSnapshot], bodies: list[dict[str, object]]) -> PrefixIndex:
    """An index where each session's conversation so far sits on one or two endpoints."""
    index = PrefixIndex()
    rng = random.Random(3)
    for body in bodies:
        chain = chain_of(body)
        for snapshot in rng.sample(endpoints, 2):
            depth = rng.randint(1, len(chain.hashes))
            index.routed(snapshot.endpoint_id, chain._replace(hashes=chain.hashes[:depth]), 0, 0.0)
    return index


def time_prefix_decisions(
    name: str, endpoints: list[EndpointSnapshot], batch: list[RouteRequest]
) -> list[float]:
    """µs per decision as `time_decisions`, plus hashing the body and the index lookup."""
    bodies = sessions(random.Random(5))
    index = seeded_index(endpoints, bodies)
    admission = default_admission()
    policy = build(POLICIES[name][0]())
    rng = random.Random(1)
    costs_us = []
    for number, request in enumerate(batch):
        body = bodies[number % len(bodies)]
        request = request._replace(prompt_tokens=PREFIX_PROMPT_TOKENS)
        hashing = time.perf_counter_ns()
        chain = chain_of(body)
        HASHING_US.append((time.perf_counter_ns() - hashing) / 1000)
        started = time.perf_counter_ns()
        _, usable = admission.admit(request, endpoints, 0.0)
        policy.rank(with_cached(request, index, chain), usable or endpoints, rng)
        costs_us.append((time.perf_counter_ns() - started) / 1000)
    return costs_us


def measure(endpoints: list[EndpointSnapshot], batch: list[RouteRequest]) -> dict[str, list[float]]:
    """Rounds interleave the variants, so load from other processes spreads over all of them."""
    variants: list[str | None] = [None, *sorted(POLICIES)]
    costs: dict[str, list[float]] = {str(v): [] for v in variants}
    chunk = len(batch) // ROUNDS
    for round_ in range(ROUNDS):
        part = batch[round_ * chunk : (round_ + 1) * chunk]
        for variant in variants:
            costs[str(variant)] += time_decisions(variant, endpoints, part)
        for name in PREFIXED:
            if name in POLICIES:
                costs.setdefault(f"{name} + prefix", [])
                costs[f"{name} + prefix"] += time_prefix_decisions(name, endpoints, part)
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.decision", description=__doc__)
    parser.add_argument("--request-cpu-us", type=float, help="a request's CPU, µs (relay bench)")
    request_cpu_us = parser.parse_args().request_cpu_us
    rng = random.Random(7)
    endpoints, batch = fleet(rng), requests(rng)
    print(f"decision = AdmissionControl.admit over {ENDPOINTS} endpoints + rank")
    print(f"{DECISIONS} decisions per policy, {ENDPOINTS} endpoints, {ROUNDS} interleaved rounds")
    if request_cpu_us:
        print(f"target p50 <= {TARGET_SHARE:.0%} of {request_cpu_us:.0f} µs of request CPU")
    costs = measure(endpoints, batch)
    print(f"endpoints with headroom passed to rank: {statistics.mean(RANKED):.1f} on average")
    share_column = f" {'of request':>10}" if request_cpu_us else ""
    print(f"{'policy':<22} {'p50 µs':>8} {'p99 µs':>8} {'p50 / round_robin':>18}{share_column}")
    base_p50 = statistics.median(costs["round_robin"])
    for variant, costs_us in costs.items():
        p50 = statistics.median(costs_us)
        p99 = statistics.quantiles(costs_us, n=100)[98]
        label = "(admission only)" if variant == "None" else variant
        share = ""
        if request_cpu_us:
            over = "  over target" if p50 / request_cpu_us > TARGET_SHARE else ""
            share = f" {p50 / request_cpu_us:10.1%}{over}"
        print(f"{label:<22} {p50:8.1f} {p99:8.1f} {p50 / base_p50:17.2f}x{share}")
    hashing = statistics.median(HASHING_US)
    print(f"hashing an {PREFIX_PROMPT_TOKENS:,}-token chat prompt (once per request, at intake):")
    print(
        f"  p50 {hashing:.1f} µs; slo_aware + prefix + hashing p50 ≈ "
        f"{statistics.median(costs['slo_aware + prefix']) + hashing:.1f} µs"
    )
    index = seeded_index(fleet(random.Random(7)), sessions(random.Random(5)))
    per_endpoint = index.memory_bytes() / max(1, len(index.holders))
    print(
        f"index memory: {index.memory_bytes() / 1024:.0f} KiB, {per_endpoint / 1024:.1f} KiB "
        f"per endpoint ({PREFIX_SESSIONS} sessions of {PREFIX_PROMPT_TOKENS:,} tokens)"
    )


if __name__ == "__main__":
    main()

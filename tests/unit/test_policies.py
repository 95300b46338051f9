"""Conformance: every policy in the registry keeps the contract the orchestrator relies on."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import TypeAdapter

import policies
from policies.base import (
    EndpointSnapshot,
    EngineSignals,
    LatencyEstimate,
    Ranking,
    RouteRequest,
    RoutingPolicy,
    SloTarget,
)
from policies.registry import POLICIES, PolicyParams, build

NAMES = sorted(POLICIES)
CLASSES = [
    SloTarget("interactive", ttft_s=0.5, tpot_s=0.05, priority=10),
    SloTarget("deadline", deadline_s=5.0),
    SloTarget("batch", sheddable=True),
]


def fleet(size: int, seed: int) -> list[EndpointSnapshot]:
    """A mixed fleet: vLLM replicas with gauges of various ages, hosted providers, cold ones."""
    rng = random.Random(seed)
    return [_endpoint(f"e{i}", rng) for i in range(size)]


def _endpoint(endpoint_id: str, rng: random.Random) -> EndpointSnapshot:
    vllm = rng.random() < 0.6
    samples = rng.choice([0, 5, 50, 500])
    latency = LatencyEstimate(
        samples=samples,
        throttled=samples // 20,
        errors=samples // 10,
        ttft_mean_s=rng.uniform(0.05, 2) if samples else None,
        ttft_base_s=rng.uniform(0.01, 0.5) if samples else None,
        ttft_per_token_s=rng.uniform(0, 1e-3) if samples else None,
        ttft_p95_s=rng.uniform(0.1, 4) if samples else None,
        tpot_mean_s=rng.uniform(0.005, 0.1) if samples else None,
        e2e_mean_s=rng.uniform(0.5, 20) if samples else None,
    )
    engine = EngineSignals(
        waiting=rng.randint(0, 30),
        running=rng.randint(0, 200),
        kv_usage=rng.random(),
        age_s=rng.uniform(0, 30),
    )
    return EndpointSnapshot(
        endpoint_id=endpoint_id,
        kind="vllm" if vllm else "openai",
        in_flight=rng.randint(0, 100),
        max_concurrency=rng.choice([None, 8, 64]),
        input_price_per_1m=0.0 if vllm else rng.choice([0.15, 2.5]),
        output_price_per_1m=0.0 if vllm else rng.choice([0.6, 10.0]),
        engine=engine if vllm else None,
        latency=latency,
    )


def requests(seed: int) -> list[RouteRequest]:
    rng = random.Random(seed)
    return [
        RouteRequest(
            request_id=f"r{i}",
            model="m",
            tenant="t",
            slo=rng.choice(CLASSES),
            prompt_tokens=rng.choice([10, 1000, 30000]),
            max_tokens=rng.choice([None, 16, 2048]),
            stream=rng.random() < 0.5,
            seq=i,
        )
        for i in range(8)
    ]


def policy(name: str) -> RoutingPolicy:
    params_cls, _ = POLICIES[name]
    return build(params_cls())


def rank_ids(
    name: str, request: RouteRequest, candidates: list[EndpointSnapshot], seed: int
) -> list[str]:
    ranking = policy(name).rank(request, candidates, random.Random(seed))
    return [e.endpoint_id for e in ranking.endpoints]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("size", [0, 1, 2, 3, 20])
def test_ranking_is_a_permutation_of_the_candidates(name: str, size: int) -> None:
    for seed in range(5):
        candidates = fleet(size, seed)
        for request in requests(seed):
            ranking = policy(name).rank(request, candidates, random.Random(seed))
            assert isinstance(ranking, Ranking)
            assert len(ranking.endpoints) == len(candidates)
            assert {id(e) for e in ranking.endpoints} == {id(e) for e in candidates}


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_gives_the_same_ranking(name: str) -> None:
    candidates = fleet(20, seed=7)
    for request in requests(7):
        first = rank_ids(name, request, candidates, seed=42)
        random.seed(999)  # the global generator must not matter
        assert rank_ids(name, request, candidates, seed=42) == first


@pytest.mark.parametrize("name", NAMES)
def test_rank_does_not_mutate_its_inputs(name: str) -> None:
    candidates = fleet(20, seed=3)
    before = list(candidates)
    for request in requests(3):
        policy(name).rank(request, candidates, random.Random(1))
        assert candidates == before
        assert all(a is b for a, b in zip(candidates, before, strict=True))


@pytest.mark.parametrize("name", NAMES)
def test_one_instance_ranks_like_a_fresh_one(name: str) -> None:
    """No hidden state: a policy that has ranked before answers like a new one."""
    shared = policy(name)
    candidates = fleet(20, seed=11)
    for request in requests(11):
        used = shared.rank(request, candidates, random.Random(5))
        fresh = policy(name).rank(request, candidates, random.Random(5))
        assert used == fresh


@pytest.mark.parametrize("name", NAMES)
def test_healthy_candidates_in_healthy_candidates_out(name: str) -> None:
    candidates = fleet(20, seed=5)
    allowed = {e.endpoint_id for e in candidates}
    for request in requests(5):
        assert set(rank_ids(name, request, candidates, seed=0)) <= allowed


@pytest.mark.parametrize("name", NAMES)
def test_params_parse_from_config_by_name(name: str) -> None:
    params: Any = TypeAdapter(PolicyParams).validate_python({"name": name})
    assert isinstance(params, POLICIES[name][0])
    assert build(params).name == name


PRESETS = Path(policies.__file__).parent / "presets"


@pytest.mark.parametrize("name", NAMES)
def test_every_policy_has_a_runnable_preset(name: str) -> None:
    data = yaml.safe_load((PRESETS / f"{name}.yaml").read_text())
    params: Any = TypeAdapter(PolicyParams).validate_python(data)
    ranking = build(params).rank(requests(0)[0], fleet(5, seed=0), random.Random(0))
    assert len(ranking.endpoints) == 5

"""prefix_only, and slo_aware's bands, prefix credit and session affinity, on plain snapshots."""

from __future__ import annotations

import random
from dataclasses import replace

from gateway.server.intake import session_of
from policies.base import EndpointSnapshot, EngineSignals, LatencyEstimate, RouteRequest, SloTarget
from policies.prefix_only import Params as PrefixOnlyParams
from policies.prefix_only import PrefixOnly
from policies.slo_aware import Params, SloAware

SLOW = LatencyEstimate(samples=100, ttft_mean_s=1.0, ttft_base_s=0.05, ttft_per_token_s=5e-4)


def route(cached: dict[str, float] | None = None, session: str | None = None) -> RouteRequest:
    slo = SloTarget("chat", ttft_s=5.0)
    return RouteRequest("r", "m", "t", slo, 4000, session=session, cached_tokens=cached or {})


def engines(count: int = 2) -> list[EndpointSnapshot]:
    return [EndpointSnapshot(f"e{i}", "vllm", latency=SLOW) for i in range(count)]


def first(
    policy: SloAware | PrefixOnly, request: RouteRequest, snaps: list[EndpointSnapshot]
) -> str:
    return policy.rank(request, snaps, random.Random(0)).endpoints[0].endpoint_id


def test_prefix_only_scores_the_holder_until_its_queue_outweighs_it() -> None:
    policy = PrefixOnly(PrefixOnlyParams())
    snaps = engines(3)
    assert first(policy, route({"e2": 3600.0}), snaps) == "e2"
    busy = [snaps[0], snaps[1], snaps[2]._replace(in_flight=40)]
    assert first(policy, route({"e2": 400.0}), busy) != "e2"  # 3·0.1 < 2·queue
    ranking = policy.rank(route(), snaps, random.Random(0))
    assert ranking.reason == "prefix_miss" and len(ranking.endpoints) == 3


def test_identical_endpoints_share_load_within_a_band() -> None:
    policy = SloAware(Params(explore_fraction=0))
    one, two = engines(2)
    slightly_faster = one._replace(latency=replace(SLOW, ttft_base_s=0.04))
    assert first(policy, route(), [slightly_faster, two._replace(in_flight=0)]) == "e0"
    assert first(policy, route(), [slightly_faster._replace(in_flight=5), two]) == "e1"
    unbanded = SloAware(Params(explore_fraction=0, band=0))
    assert first(unbanded, route(), [slightly_faster._replace(in_flight=5), two]) == "e0"


def test_a_hit_keeps_the_session_unless_the_holder_queues() -> None:
    policy = SloAware(Params(explore_fraction=0))
    snaps = engines(2)
    assert first(policy, route({"e1": 3500.0}), [snaps[0], snaps[1]._replace(in_flight=3)]) == "e1"
    queued = snaps[1]._replace(engine=EngineSignals(waiting=8.0, running=64.0, age_s=0.0))
    assert first(policy, route({"e1": 3500.0}), [snaps[0], queued]) == "e0"  # credit eaten
    blind = SloAware(Params(explore_fraction=0, prefix_aware=False))
    assert first(blind, route({"e1": 3500.0}), [snaps[0], snaps[1]._replace(in_flight=3)]) == "e0"


def test_a_sessions_first_turn_goes_to_its_rendezvous_endpoint_on_every_replica() -> None:
    snaps = engines(4)
    homes = set()
    for seed in range(5):  # replicas with different rngs and candidate orders
        policy = SloAware(Params(explore_fraction=0))
        order = random.Random(seed).sample(snaps, len(snaps))
        homes.add(
            policy.rank(route(session="conv-42"), order, random.Random(seed))
            .endpoints[0]
            .endpoint_id
        )
    assert len(homes) == 1
    spread = {
        first(SloAware(Params(explore_fraction=0)), route(session=f"s{i}"), snaps)
        for i in range(40)
    }
    assert len(spread) == 4  # sessions spread over the endpoints
    off = SloAware(Params(explore_fraction=0, session_affinity=False))
    assert (
        len(
            {
                off.rank(route(session="conv-42"), snaps, random.Random(s)).endpoints[0].endpoint_id
                for s in range(20)
            }
        )
        > 1
    )


def test_session_hint_sources() -> None:
    assert session_of({b"x-session-id": "h"}, {"user": "u"}) == "h"
    assert session_of({}, {"prompt_cache_key": "k", "user": "u"}) == "k"
    assert session_of({}, {"user": "u"}) == "u"
    assert session_of({}, {"user": 3}) is None

"""Fault matrix 3: a provider's 5xx burst and a 429 storm with Retry-After.

Every client request must still succeed through the other endpoint (or, when no endpoint is left,
get a clear 429/503 with Retry-After), and the gateway must not hammer the failing provider:
upstream attempts are bounded per request (`server.max_attempts`) and in total (the breaker for
5xx, the Retry-After cool-down for 429).
"""

from __future__ import annotations

import itertools

import pytest

from tests.faults.clients import Load
from tests.faults.upstreams import Answer, ScriptedUpstream, Seen, serving
from tests.fixtures.gateway import (
    Fleet,
    engine,
    eventually,
    fleet_gateway,
    gateway_for,
    member,
    provider,
    sim_stats,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
RETRY_AFTER_S = 2
BREAKER = {"breaker_failures": 3, "breaker_cooldown_s": 30.0, "refresh_s": 0.05}


def storm(seen: Seen) -> Answer:
    """429 with Retry-After on completions; its /models (the health probe) stays fine."""
    if not seen.path.endswith("/completions"):
        return Answer()
    body = b'{"error": {"message": "Rate limit reached", "type": "requests", "code": null}}'
    return Answer(429, [("retry-after", str(RETRY_AFTER_S))], body)


def test_5xx_burst_fails_over_and_the_breaker_bounds_upstream_attempts() -> None:
    bursting = provider(faults={"error_rate": 1.0})
    members: Fleet = {"a-provider": bursting, "b-good": engine()}
    with fleet_gateway(members, state=BREAKER) as (gateway, urls):
        with Load(gateway.base_url, threads=3) as load:
            assert eventually(lambda: len(load.results) >= 40, 20)
        attempts = sim_stats(urls["a-provider"])["requests_received"]
    assert load.failures() == []
    assert max(r.attempts for r in load.results) <= 2
    # 3 consecutive failures open the breaker; requests already routed may still land (3 threads).
    assert 3 <= attempts <= 3 + 3, attempts


def test_429_storm_honours_retry_after_and_fails_over() -> None:
    upstream = ScriptedUpstream(storm)
    with serving(upstream) as limited:
        members: Fleet = {"a-limited": member(limited, "openai"), "b-good": engine()}
        with (
            fleet_gateway(members, state=BREAKER) as (gateway, _),
            Load(gateway.base_url, threads=3) as load,
        ):
            assert eventually(lambda: len(load.results) >= 60, 20)
            assert eventually(lambda: len(upstream.completions()) >= 2, 2 * RETRY_AFTER_S + 2)
    hits = [s.at_s for s in upstream.completions()]
    assert load.failures() == []
    assert max(r.attempts for r in load.results) <= 2
    bursts = _bursts(hits, gap_s=0.5)
    assert all(len(burst) <= 3 for burst in bursts), bursts  # at most the requests in flight
    gaps = [later[0] - earlier[-1] for earlier, later in itertools.pairwise(bursts)]
    assert gaps and min(gaps) >= RETRY_AFTER_S - 0.3, gaps


def test_every_endpoint_rate_limited_answers_429_then_waits_out_the_cool_down() -> None:
    upstream = ScriptedUpstream(storm)
    server = {"max_attempts": 2, "max_retry_after_s": 0.5}
    with (
        serving(upstream) as limited,
        gateway_for(limited, "only", kind="openai", server=server, state=BREAKER) as gateway,
    ):
        first = Load(gateway.base_url).one()
        after_first = len(upstream.completions())
        during = [Load(gateway.base_url).one() for _ in range(5)]
        after_cool_down = len(upstream.completions())
    assert first.status == 429
    # The provider asked for longer than max_retry_after_s: no retry at all, the client gets
    # the provider's wait instead (a capped retry would only have met another 429).
    assert after_first == 1
    assert first.retry_after is not None and int(first.retry_after) >= 1
    assert {r.status for r in during} <= {429, 503}
    assert all(r.retry_after is not None for r in during)
    assert after_cool_down == after_first, "requests reached a provider that is cooling down"


def _bursts(hits: list[float], gap_s: float) -> list[list[float]]:
    """Group arrival times that are closer than gap_s."""
    bursts: list[list[float]] = []
    for at in sorted(hits):
        if bursts and at - bursts[-1][-1] < gap_s:
            bursts[-1].append(at)
        else:
            bursts.append([at])
    return bursts


def test_a_provider_out_of_quota_is_failed_over_and_left_alone() -> None:
    members: Fleet = {"a-broke": provider(faults={"insufficient_quota": True}), "b-good": engine()}
    with fleet_gateway(members, state=BREAKER) as (gateway, urls):
        results = [Load(gateway.base_url).one() for _ in range(6)]
        attempts = sim_stats(urls["a-broke"])["requests_received"]
    assert [r.status for r in results] == [200] * 6
    assert {r.endpoint for r in results} == {"b-good"}
    assert attempts == 1  # then out of rotation until its quota could have been topped up

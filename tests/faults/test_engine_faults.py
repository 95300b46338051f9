"""Fault matrix 1-2: an engine process killed mid-stream, and an engine that hangs."""

from __future__ import annotations

import pytest

from tests.faults.clients import Load, Stream
from tests.faults.processes import EngineProcess
from tests.fixtures.gateway import (
    Fleet,
    admin_endpoints,
    engine,
    eventually,
    fleet_gateway,
    sim_stats,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
FIRST_BYTE_TIMEOUT_S = 1.0
# Probes every 0.2 s; two consecutive failures open a breaker for 1 s.
FAST_HEALTH = {
    "health_interval_s": 0.2,
    "breaker_failures": 2,
    "breaker_cooldown_s": 1.0,
    "refresh_s": 0.05,
}


def phase(base_url: str, endpoint_id: str) -> str:
    return str(admin_endpoints(base_url)[endpoint_id]["phase"])


def stream_on(base_url: str, endpoint_id: str) -> tuple[Stream, list[Stream]]:
    """Open streams until one lands on `endpoint_id` (round robin: at most a few)."""
    others: list[Stream] = []
    for _ in range(4):
        stream = Stream(base_url)
        assert stream.started.wait(10)
        if stream.endpoint == endpoint_id:
            return stream, others
        others.append(stream)
    raise AssertionError(f"no stream was routed to {endpoint_id}")


def test_engine_killed_mid_stream_errors_its_streams_then_fails_over_and_recovers() -> None:
    server = {"first_byte_timeout_s": FIRST_BYTE_TIMEOUT_S, "admin_key_env": "TEST_ADMIN_KEY"}
    with EngineProcess() as victim:
        members: Fleet = {"a-victim": victim.url, "b-good": engine()}
        with fleet_gateway(members, server=server, state=FAST_HEALTH) as (gateway, _):
            cut, others = stream_on(gateway.base_url, "a-victim")
            victim.kill()
            assert cut.ended.wait(10), "a stream of the killed engine hung"
            after = [Load(gateway.base_url).one() for _ in range(6)]  # before it is marked down
            assert eventually(lambda: phase(gateway.base_url, "a-victim") != "available", 5)
            victim.start()
            assert eventually(lambda: phase(gateway.base_url, "a-victim") == "available", 10)
            back = [Load(gateway.base_url).one() for _ in range(4)]
            for stream in others:
                stream.close()
    assert cut.status == 200 and cut.ended_with_error_event, cut.text[-300:]
    assert all(r.status == 200 and r.complete for r in after + back)
    assert max(r.elapsed_s for r in after) < FIRST_BYTE_TIMEOUT_S + 1.0
    assert {r.endpoint for r in after} == {"b-good"}
    assert "a-victim" in {r.endpoint for r in back}


def test_hung_engine_times_out_fails_over_and_opens_its_breaker() -> None:
    state = FAST_HEALTH | {"health_interval_s": 30.0}  # its /health still answers: no probes
    server = {"first_byte_timeout_s": 0.5, "admin_key_env": "TEST_ADMIN_KEY"}
    members = {"a-hung": engine(faults={"hang": True}), "b-good": engine()}
    with fleet_gateway(members, server=server, state=state) as (gateway, urls):
        hung = urls["a-hung"]
        first = [Load(gateway.base_url).one() for _ in range(4)]
        assert eventually(lambda: phase(gateway.base_url, "a-hung") == "breaker_open", 3)
        tried = sim_stats(hung)["requests_received"]
        later = [Load(gateway.base_url).one() for _ in range(6)]
        tried_later = sim_stats(hung)["requests_received"]
    assert all(r.status == 200 and r.complete for r in first + later)
    assert {r.endpoint for r in first + later} == {"b-good"}
    slow = [r for r in first if r.attempts == 2]
    assert slow and all(0.5 <= r.elapsed_s < 3.0 for r in slow)
    assert tried_later == tried, "requests reached an engine whose breaker is open"
    assert all(r.attempts == 1 and r.elapsed_s < 0.5 for r in later)

"""Leases outlive their TTL while held (renewed), and vanish once dropped; time is injected."""

from __future__ import annotations

from gateway.state.background import Background
from gateway.state.leases import LeaseBook
from gateway.state.memory_store import MemoryStatsStore
from gateway.state.view import SharedView
from gateway.telemetry.metrics import Metrics

T0 = 1_000_000.0
TTL_S = 30.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def lease_book(store: MemoryStatsStore, clock: Clock, background: Background) -> LeaseBook:
    view = SharedView(store, ["e"], 0.1, clock=clock)
    return LeaseBook(store, view, Metrics(), background, ttl_s=TTL_S, clock=clock)


async def shared_count(store: MemoryStatsStore, now: float) -> int:
    return (await store.read_in_flight(["e"], now=now))["e"]


async def test_a_lease_held_past_its_ttl_stays_counted_until_dropped() -> None:
    store, clock, background = MemoryStatsStore(), Clock(), Background()
    leases = lease_book(store, clock, background)
    leases.take("e", "long-stream", tokens=100)
    for _ in range(8):  # renewed each third of the TTL, as `run` does: 2.7 TTLs in all
        clock.now += TTL_S / 3
        leases.renew(clock.now)
        await background.drain()
        assert await shared_count(store, clock.now) == 1
    leases.drop("e", "long-stream")
    await background.drain()
    assert await shared_count(store, clock.now) == 0


async def test_a_lease_is_renewed_only_once_a_third_of_its_ttl_has_passed() -> None:
    store, clock, background = MemoryStatsStore(), Clock(), Background()
    leases = lease_book(store, clock, background)
    leases.take("e", "stream", tokens=100)
    leases.renew(T0 + TTL_S / 3 - 0.01)
    await background.drain()
    assert await shared_count(store, T0 + TTL_S) == 0  # not renewed: expired at its TTL
    leases.renew(T0 + TTL_S / 3)
    await background.drain()
    assert await shared_count(store, T0 + TTL_S) == 1


async def test_a_lease_dropped_while_its_renewal_runs_stays_dropped() -> None:
    store, clock, background = MemoryStatsStore(), Clock(), Background()
    leases = lease_book(store, clock, background)
    leases.take("e", "short", tokens=100)
    clock.now += TTL_S / 3
    leases.renew(clock.now)  # the renewal is spawned, not run yet
    leases.drop("e", "short")
    await background.drain()
    assert await shared_count(store, clock.now) == 0


async def test_without_renewal_a_lease_expires_after_its_ttl() -> None:
    """The contrast: what a crashed replica's leases do (and what `run` prevents)."""
    store, clock = MemoryStatsStore(), Clock()
    leases = lease_book(store, clock, Background())
    leases.take("e", "orphan", tokens=100)
    assert await shared_count(store, T0 + TTL_S - 0.01) == 1
    assert await shared_count(store, T0 + TTL_S) == 0


async def test_prefill_counts_from_the_take_until_the_first_token_or_the_end() -> None:
    store, clock, background = MemoryStatsStore(), Clock(), Background()
    leases = lease_book(store, clock, background)
    view = leases.view
    leases.take("e", "streamed", tokens=1500, prefill=1200)
    leases.take("e", "unanswered", tokens=900, prefill=800)
    assert view.local_prefill["e"] == 2000 and view.local_tokens["e"] == 2400
    leases.first_token("e", "streamed")
    leases.first_token("e", "streamed")  # a second report changes nothing
    assert view.local_prefill["e"] == 800
    leases.drop("e", "streamed")  # its prefill went at its first token, not again
    assert view.local_prefill["e"] == 800 and view.local_tokens["e"] == 900
    leases.drop("e", "unanswered")  # no first token: its prefill goes with its lease
    leases.first_token("e", "unanswered")  # after the end: nothing held
    assert view.local_prefill["e"] == 0 and view.local_tokens["e"] == 0 and view.local["e"] == 0
    await background.drain()

"""The shared circuit breaker and cooldowns: every client sees the same state."""

from __future__ import annotations

import asyncio

from gateway.state.breaker import BreakerPolicy, BreakerState
from gateway.state.store import StatsStore
from tests.contract.conftest import StoreClients

NOW = 1_000_000.0
POLICY = BreakerPolicy(failure_threshold=3, cooldown_s=10.0, trial_timeout_s=4.0)


async def fail(store: StatsStore, now: float, times: int = 1) -> BreakerState:
    state = BreakerState()
    for _ in range(times):
        state = await store.record_result("a", ok=False, now=now, policy=POLICY)
    return state


async def test_consecutive_failures_from_all_clients_open_the_breaker(
    stores: StoreClients,
) -> None:
    """Across clients: skipped with Redis down (each replica counts only its own failures)."""
    first, second = await stores.open(2)
    await fail(first, NOW, 2)
    state = await fail(second, NOW)
    assert state == BreakerState(failures=3, open_until_s=NOW + 10)
    stats = (await first.read(["a"], now=NOW + 1))["a"]
    assert stats.breaker.phase(NOW + 1) == "open"
    assert not stats.available(NOW + 1)


async def test_a_success_resets_the_failure_count(store: StatsStore) -> None:
    await fail(store, NOW, 2)
    assert await store.record_result("a", ok=True, now=NOW, policy=POLICY) == BreakerState()
    assert (await fail(store, NOW)).failures == 1


async def test_a_success_while_open_is_ignored(store: StatsStore) -> None:
    opened = await fail(store, NOW, 3)
    assert await store.record_result("a", ok=True, now=NOW + 1, policy=POLICY) == opened


async def test_half_open_grants_one_trial_and_success_closes(stores: StoreClients) -> None:
    """Across clients: skipped with Redis down (each replica grants its own trial)."""
    first, second = await stores.open(2)
    await fail(first, NOW, 3)
    assert not await first.claim_trial("a", now=NOW + 5, policy=POLICY), "still cooling down"
    assert await first.claim_trial("a", now=NOW + 10, policy=POLICY)
    assert not await second.claim_trial("a", now=NOW + 11, policy=POLICY)
    assert await second.record_result("a", ok=True, now=NOW + 12, policy=POLICY) == BreakerState()
    assert (await first.read(["a"], now=NOW + 12))["a"].available(NOW + 12)


async def test_a_failed_trial_reopens_for_another_cooldown(store: StatsStore) -> None:
    await fail(store, NOW, 3)
    assert await store.claim_trial("a", now=NOW + 10, policy=POLICY)
    state = await fail(store, NOW + 11)
    assert state.phase(NOW + 20) == "open"
    assert state.open_until_s == NOW + 21


async def test_an_abandoned_trial_can_be_claimed_after_its_timeout(store: StatsStore) -> None:
    await fail(store, NOW, 3)
    assert await store.claim_trial("a", now=NOW + 10, policy=POLICY)
    assert not await store.claim_trial("a", now=NOW + 13.9, policy=POLICY)
    assert await store.claim_trial("a", now=NOW + 14, policy=POLICY)


async def test_concurrent_trial_claims_grant_exactly_one(stores: StoreClients) -> None:
    """Across clients: skipped with Redis down (each replica grants its own trial)."""
    clients = await stores.open(4)
    await fail(clients[0], NOW, 3)
    claims = await asyncio.gather(
        *(clients[i % 4].claim_trial("a", now=NOW + 10, policy=POLICY) for i in range(20))
    )
    assert sum(claims) == 1


async def test_a_closed_breaker_grants_no_trial(store: StatsStore) -> None:
    assert not await store.claim_trial("a", now=NOW, policy=POLICY)


async def test_cooldowns_are_shared_and_never_shortened(stores: StoreClients) -> None:
    """Across clients: skipped with Redis down (each replica keeps its own cooldowns)."""
    first, second = await stores.open(2)
    assert await first.cool_down("a", until_s=NOW + 30, now=NOW) == NOW + 30
    assert await second.cool_down("a", until_s=NOW + 5, now=NOW) == NOW + 30
    stats = (await second.read(["a"], now=NOW + 10))["a"]
    assert stats.cooldown_until_s == NOW + 30
    assert not stats.available(NOW + 10)
    assert stats.available(NOW + 30)


async def test_breaker_and_cooldown_do_not_erase_each_other(store: StatsStore) -> None:
    await store.cool_down("a", until_s=NOW + 30, now=NOW)
    await fail(store, NOW, 2)
    await store.record_result("a", ok=True, now=NOW, policy=POLICY)
    stats = (await store.read(["a"], now=NOW))["a"]
    assert stats.cooldown_until_s == NOW + 30
    assert stats.breaker == BreakerState()

"""Fairness counters (policies/fair_share.py): charged and read back atomically, a new or
returning key lifted to the least active one, shared exactly across replicas."""

from __future__ import annotations

import asyncio

from gateway.state.store import StatsStore
from policies.fair_share import ACTIVE_S, FORGET_S
from tests.contract.conftest import StoreClients

NOW = 1_000_000.0


async def test_charges_add_up_per_key_and_class(store: StatsStore) -> None:
    await store.charge_fair_share("interactive", {"a": 100.0, "b": 40.0}, now=NOW)
    counters = await store.charge_fair_share("interactive", {"a": 50.0}, now=NOW + 1)
    assert counters.tokens == {"a": 150.0, "b": 40.0}
    assert counters.seen_s == {"a": NOW + 1, "b": NOW}
    other = await store.charge_fair_share("batch", {}, now=NOW + 1)
    assert other.tokens == {}


async def test_reading_charges_nothing(store: StatsStore) -> None:
    await store.charge_fair_share("c", {"a": 10.0}, now=NOW)
    assert (await store.charge_fair_share("c", {}, now=NOW + 2)).tokens == {"a": 10.0}


async def test_a_new_key_starts_at_the_least_active_counter(store: StatsStore) -> None:
    await store.charge_fair_share("c", {"heavy": 5000.0, "light": 800.0}, now=NOW)
    counters = await store.charge_fair_share("c", {"new": 10.0}, now=NOW + 1)
    assert counters.tokens["new"] == 810.0  # no banked credit: lifted to 800 first


async def test_a_returning_key_is_lifted_but_an_active_one_is_not(store: StatsStore) -> None:
    await store.charge_fair_share("c", {"away": 100.0, "busy": 200.0}, now=NOW)
    await store.charge_fair_share("c", {"busy": 9800.0}, now=NOW + ACTIVE_S)
    counters = await store.charge_fair_share("c", {"away": 1.0}, now=NOW + ACTIVE_S + 1)
    assert counters.tokens == {"away": 10_001.0, "busy": 10_000.0}
    counters = await store.charge_fair_share("c", {"busy": 1.0}, now=NOW + ACTIVE_S + 2)
    assert counters.tokens["busy"] == 10_001.0


async def test_a_correction_may_take_tokens_back(store: StatsStore) -> None:
    await store.charge_fair_share("c", {"a": 300.0}, now=NOW)
    counters = await store.charge_fair_share("c", {"a": -120.0}, now=NOW + 1)
    assert counters.tokens == {"a": 180.0}


async def test_a_key_idle_for_long_is_forgotten(store: StatsStore) -> None:
    await store.charge_fair_share("c", {"old": 50.0}, now=NOW)
    counters = await store.charge_fair_share("c", {"new": 1.0}, now=NOW + FORGET_S + 1)
    assert set(counters.tokens) == {"new"}


async def test_concurrent_charges_from_four_replicas_sum_exactly(stores: StoreClients) -> None:
    """Across clients: skipped with Redis down (each replica counts only its own). Every key
    active first, so no charge lifts one."""
    clients = await stores.open(4)
    keys = ("a", "r0", "r1", "r2", "r3")
    await clients[0].charge_fair_share("c", dict.fromkeys(keys, 0.0), now=NOW)
    await asyncio.gather(
        *(
            clients[i % 4].charge_fair_share("c", {"a": 1.0, f"r{i % 4}": 2.0}, now=NOW)
            for i in range(40)
        )
    )
    counters = await clients[0].charge_fair_share("c", {}, now=NOW)
    assert counters.tokens == {"a": 40.0, "r0": 20.0, "r1": 20.0, "r2": 20.0, "r3": 20.0}

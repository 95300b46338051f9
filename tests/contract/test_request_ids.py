"""Leases and budget holds are keyed by the ids the gateway mints, never by a client's
x-request-id: clients repeat theirs (by accident or not), and a repeated key would let any
number of requests share one concurrency slot and leave leases behind. A property test over
every store: whatever labels clients send (all the same, colliding across tenants, shaped like
a minted id), the store admits exactly what the limits allow and holds nothing once every
request has ended."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.server.middleware import mint_request_id
from gateway.state.store import StatsStore, TenantCharge, TenantQuota
from gateway.state.usage import BudgetQuota, Settlement
from tests.contract.conftest import landed

NOW = 1_000_020.0
LIMIT = 3
HOLD_PUSD = 10
BUDGET = BudgetQuota(day_pusd=HOLD_PUSD * (LIMIT + 1))
_runs = itertools.count()

labels = st.sampled_from(["same", "same", "other", "0123456789abcdef00000000"])
# ("start", tenant, client label) or ("end", which of the running requests)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.sampled_from(["t1", "t2"]), labels),
        st.tuples(st.just("end"), st.integers(0, 7)),
    ),
    max_size=24,
)


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=steps)
async def test_limits_hold_whatever_ids_clients_repeat(
    store: StatsStore, steps: list[tuple[str, ...]]
) -> None:
    run = next(_runs)
    running: list[tuple[str, str]] = []  # (tenant, the gateway's id)
    for step in steps:
        if step[0] == "end":
            if running:
                tenant, key = running.pop(int(step[1]) % len(running))
                await _end(store, f"{tenant}-{run}", key)
                # a settlement through a write-behind lands a batch later: until then the
                # budget still holds the request's cost (refusing early, never overspending)
                await landed(store)
            continue
        tenant, _label = step[1], step[2]  # the label is only logged and forwarded
        key = mint_request_id()
        live = sum(1 for t, _ in running if t == tenant)
        verdict = await _start(store, f"{tenant}-{run}", key)
        assert verdict == ("admitted" if live < LIMIT else "concurrency")
        if verdict == "admitted":
            running.append((tenant, key))
    for tenant, key in running:
        await _end(store, f"{tenant}-{run}", key)
    await landed(store)
    for tenant in (f"t1-{run}", f"t2-{run}"):  # nothing left: a full set of new requests fits
        assert await store.read_in_flight([tenant], now=NOW) == {tenant: 0}
        keys = [mint_request_id() for _ in range(LIMIT + 1)]
        verdicts = [await _start(store, tenant, key) for key in keys]
        assert verdicts == ["admitted"] * LIMIT + ["concurrency"]


async def _start(store: StatsStore, tenant: str, key: str) -> str:
    """A request admitted against its tenant's concurrency and budget, with its lease on the
    tenant's endpoint, all keyed by `key`."""
    charge = TenantCharge(tenant, key, 1, TenantQuota(concurrent=LIMIT), 60, NOW, BUDGET, HOLD_PUSD)
    verdict = (await store.admit_tenant(charge)).verdict
    if verdict == "admitted":
        await store.acquire(tenant, key, ttl_s=60, now=NOW)
    return verdict


async def _end(store: StatsStore, tenant: str, key: str) -> None:
    await store.release(tenant, key, now=NOW)
    await store.release_tenant(tenant, key, now=NOW)
    settlement = Settlement(tenant, NOW, None, 0, 0, 60.0, None, BUDGET, key, HOLD_PUSD)
    await store.settle(settlement)

"""Fair share inside a class: the deadline queue ordered by fairness counters (pure), and the
counters this replica charges (gateway/core/fair_charges.py) over a memory store."""

from __future__ import annotations

from collections import Counter

import pytest
from pydantic import ValidationError

from gateway.config.settings import TenantFairness
from gateway.core.fair_charges import FairShare, SubIds
from gateway.state.background import run_to_completion
from gateway.state.memory_store import MemoryStatsStore
from policies.base import RouteRequest, SloTarget
from policies.deadline_queue import DeadlineQueue
from policies.fair_share import ACTIVE_S, FORGET_S, Counters, charged, floor, level

NOW_S = 1000.0
CHAT = SloTarget("chat", ttft_s=1.0, priority=10)


def queue_of(*waiting: tuple[str, str, str, float]) -> DeadlineQueue[str]:
    """(item, class, key, deadline) each."""
    queue: DeadlineQueue[str] = DeadlineQueue(max_size=100)
    for item, group, key, deadline_s in waiting:
        assert queue.push(item, deadline_s, group=group, key=key)
    return queue


def popped(queue: DeadlineQueue[str], levels: dict[str, float]) -> list[str]:
    items = []
    while (found := queue.pop(NOW_S, level=lambda group, key: levels.get(key, 0.0))) is not None:
        items.append(found.item)
    return items


def test_the_least_served_key_of_a_class_goes_first_whatever_it_arrived() -> None:
    queue = queue_of(
        ("noisy-1", "chat", "noisy", NOW_S + 1.0),
        ("noisy-2", "chat", "noisy", NOW_S + 1.1),
        ("quiet-1", "chat", "quiet", NOW_S + 1.2),
    )
    assert popped(queue, {"noisy": 5000.0, "quiet": 100.0}) == ["quiet-1", "noisy-1", "noisy-2"]


def test_without_levels_the_queue_stays_first_come_first_served() -> None:
    queue = queue_of(("noisy-1", "chat", "noisy", NOW_S + 1.0), ("quiet-1", "chat", "quiet", 1e4))
    assert [p.item for p in iter(lambda: queue.pop(NOW_S), None)] == ["noisy-1", "quiet-1"]


def test_classes_keep_their_order_fairness_orders_only_within_one() -> None:
    queue = queue_of(
        ("urgent-heavy", "urgent", "heavy", NOW_S + 0.5),
        ("chat-light", "chat", "light", NOW_S + 1.0),
        ("chat-heavy", "chat", "heavy", NOW_S + 0.9),
    )
    levels = {"heavy": 9000.0, "light": 0.0}
    assert popped(queue, levels) == ["urgent-heavy", "chat-light", "chat-heavy"]


def test_the_request_passed_over_is_noted_as_waiting_for_fairness() -> None:
    queue = queue_of(("noisy-1", "chat", "noisy", NOW_S + 1.0), ("quiet-1", "chat", "quiet", 1e4))
    levels = {"noisy": 10.0, "quiet": 0.0}
    first = queue.pop(NOW_S, level=lambda group, key: levels[key])
    second = queue.pop(NOW_S, level=lambda group, key: levels[key])
    assert first is not None and (first.item, first.deferred) == ("quiet-1", False)
    assert second is not None and (second.item, second.deferred) == ("noisy-1", True)


def test_work_conserving_what_fits_goes_when_the_least_served_does_not() -> None:
    queue = queue_of(("big-quiet", "chat", "quiet", NOW_S + 1.0), ("small", "chat", "noisy", 1e4))
    found = queue.pop(NOW_S, fits=lambda item: item == "small", level=lambda g, k: 0.0)
    assert found is not None and found.item == "small"


def test_no_starvation_the_heavy_key_is_served_once_the_light_one_catches_up() -> None:
    """Both keys always have a request waiting; each served request costs 100 tokens."""
    levels = {"heavy": 1000.0, "light": 0.0}
    queue: DeadlineQueue[str] = DeadlineQueue(max_size=100)
    for key in levels:
        queue.push(key, NOW_S + 10, group="chat", key=key)
    served: Counter[str] = Counter()
    for _ in range(30):
        found = queue.pop(NOW_S, level=lambda group, key: levels[key])
        assert found is not None
        served[found.item] += 1
        levels[found.item] += 100.0
        queue.push(found.item, NOW_S + 10, group="chat", key=found.item)
    assert served["light"] == 20 and served["heavy"] == 10  # equal from the 11th on


def test_a_new_key_starts_at_the_least_active_counter_not_at_zero() -> None:
    counters = Counters({"a": 800.0, "b": 300.0}, {"a": NOW_S, "b": NOW_S})
    lowest = floor(counters, NOW_S)
    assert lowest == 300.0
    assert level(counters, "new", NOW_S, lowest) == 300.0
    assert charged(counters, {"new": 5.0}, NOW_S).tokens["new"] == 305.0


def test_an_idle_key_banks_no_credit_and_an_active_one_keeps_its_counter() -> None:
    counters = Counters(
        {"idle": 10.0, "busy": 700.0}, {"idle": NOW_S - 2 * ACTIVE_S, "busy": NOW_S}
    )
    lowest = floor(counters, NOW_S)
    assert level(counters, "idle", NOW_S, lowest) == 700.0
    assert level(counters, "busy", NOW_S, lowest) == 700.0


def test_with_nobody_active_every_returning_key_starts_level() -> None:
    long_ago = NOW_S - 2 * ACTIVE_S
    counters = Counters({"a": 10.0, "b": 700.0}, {"a": long_ago, "b": long_ago})
    lowest = floor(counters, NOW_S)
    assert level(counters, "a", NOW_S, lowest) == level(counters, "b", NOW_S, lowest) == 700.0


def route(request_id: str, tenant: str, sub: str | None = None) -> RouteRequest:
    return RouteRequest(request_id, "m", tenant, CHAT, 100, 50, True, fairness_key=sub)


def test_a_weight_divides_what_a_tenant_is_charged() -> None:
    fair = FairShare({"gold": 2.0})
    fair.admitted(route("1", "gold"), 1000)
    fair.admitted(route("2", "plain"), 1000)
    assert fair.level("chat", "gold", NOW_S) == 500.0
    assert fair.level("chat", "plain", NOW_S) == 1000.0


def test_a_weight_must_be_positive() -> None:
    with pytest.raises(ValidationError, match="weight"):
        TenantFairness(weight=0)


def test_the_estimate_is_corrected_to_the_uncached_prompt_and_output_served() -> None:
    fair = FairShare()
    fair.admitted(route("1", "t"), 1000)
    fair.ended(route("1", "t"), prompt=600, cached=400, output=100)
    assert fair.level("chat", "t", NOW_S) == 300.0
    fair.ended(route("1", "t"), prompt=600, cached=0, output=100)  # once only
    fair.ended(route("never-admitted", "t"), prompt=600, cached=0, output=100)
    assert fair.level("chat", "t", NOW_S) == 300.0


def test_a_sub_tenant_counts_on_its_own() -> None:
    fair = FairShare()
    fair.admitted(route("1", "acme", "acme/team-a"), 1000)
    assert fair.level("chat", "acme/team-a", NOW_S) == 1000.0
    assert fair.level("chat", "acme", NOW_S) == 0.0


def test_sync_shares_the_counters_and_keeps_ordering_continuous() -> None:
    store = MemoryStatsStore()
    here, there = FairShare(), FairShare()
    here.admitted(route("1", "a"), 400)
    there.admitted(route("2", "b"), 100)
    run_to_completion(here.sync(store, NOW_S))
    assert here.level("chat", "a", NOW_S) == 400.0  # the same before and after the sync
    run_to_completion(there.sync(store, NOW_S + 1))
    assert there.level("chat", "a", NOW_S + 1) == 400.0  # the other replica's charge
    assert there.level("chat", "b", NOW_S + 1) == 500.0  # new: lifted to a's 400 first


def test_a_replica_that_charged_nothing_reads_what_its_queue_asks_about() -> None:
    store = MemoryStatsStore()
    busy, idle = FairShare(), FairShare()
    busy.admitted(route("1", "a"), 400)
    run_to_completion(busy.sync(store, NOW_S))
    assert idle.level("chat", "a", NOW_S) == 0.0  # not read yet: asked for now
    run_to_completion(idle.sync(store, NOW_S + 1))
    assert idle.level("chat", "a", NOW_S + 1) == 400.0


def test_a_full_queue_gives_the_most_served_keys_newest_place_to_a_less_served_one() -> None:
    queue = queue_of(
        ("noisy-1", "chat", "noisy", NOW_S + 1.0),
        ("noisy-2", "chat", "noisy", NOW_S + 1.1),
        ("busy-1", "chat", "busy", NOW_S + 1.2),
        ("batch-noisy", "batch", "noisy", NOW_S + 1.3),
    )
    levels = {"noisy": 5000.0, "busy": 3000.0, "quiet": 100.0}.__getitem__

    def of(group: str, key: str) -> float:
        return levels(key)

    assert queue.displace("chat", "busy", of) == "noisy-2"  # the newest of the most served
    assert queue.displace("chat", "noisy", of) is None  # nobody is served more than it
    assert queue.displace("chat", "quiet", of, mate=lambda item: item != "noisy-1") == "busy-1"
    assert queue.displace("chat", "quiet", of) == "noisy-1"
    assert queue.displace("chat", "quiet", of) is None  # another class's waiter stays
    assert len(queue) == 1


def test_a_tenant_keeps_at_most_its_cap_of_sub_ids_apart_until_one_is_forgotten() -> None:
    ids = SubIds()
    assert [ids.key("acme", named, 2, NOW_S) for named in ("a", "b", "c")] == [
        "acme/a",
        "acme/b",
        "acme",  # past the cap: counted as the tenant
    ]
    assert ids.key("acme", "a", 2, NOW_S + 1) == "acme/a"  # a known id stays apart
    assert ids.key("zeta", "c", 2, NOW_S) == "zeta/c"  # each tenant has its own cap
    assert ids.key("acme", "c", 2, NOW_S + FORGET_S + 0.5) == "acme/c"  # b was forgotten


def test_a_scenario_tenants_weight_reaches_the_simulated_gateway() -> None:
    """noisy_neighbour under fair share, the noisy tenant weighted 4 against 1: the simulated
    gateway reads the weight from the scenario, and the noisy tenant is served more."""
    from benchmarks.noisy_neighbour import POLICY, measure_tenants, variant
    from gateway.config.settings import TenantFairness
    from gateway.offline.fairness_scenarios import NOISY
    from gateway.offline.simulator import Simulator

    def noisy_served(weight: float) -> float:
        scenario = variant("fair")
        tenants = dict(scenario.tenants)
        fairness = TenantFairness(weight=weight)
        tenants[NOISY] = tenants[NOISY].model_copy(update={"fairness": fairness})
        scenario = scenario.model_copy(update={"tenants": tenants})
        result = Simulator(scenario, scenario.plan(1), {"name": POLICY}, seed=1).run()
        return measure_tenants(result.records, scenario)[f"{NOISY}_served_tokens"]

    assert noisy_served(4.0) > noisy_served(1.0)

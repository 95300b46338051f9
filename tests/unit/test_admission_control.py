"""The admission state both the live gateway and the offline simulator drive, with `now` given."""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.core.admission_control import AdmissionControl
from gateway.state.memory_store import MemoryStatsStore
from policies.admission import AdmissionParams, Admit, Queue, Reason, Reject
from policies.base import EndpointSnapshot, EngineSignals, RouteRequest, SloTarget

INTERACTIVE = SloTarget("interactive", ttft_s=1.0, priority=10)
NOW_S = 1000.0


@dataclass(frozen=True)
class Waiter:
    route: RouteRequest


def engine(kv_usage: float, endpoint_id: str = "e") -> EndpointSnapshot:
    signals = EngineSignals(waiting=0, running=1, kv_usage=kv_usage, age_s=0.1)
    return EndpointSnapshot(endpoint_id, "vllm", engine=signals)


def route(request_id: str, model: str = "m") -> RouteRequest:
    return RouteRequest(request_id, model, "app", INTERACTIVE, 100, 50, True, seq=0)


def control(params: AdmissionParams | None = None) -> AdmissionControl[Waiter]:
    def never(coroutine: Coroutine[Any, Any, Any]) -> None:
        coroutine.close()

    params = params or AdmissionParams()
    return AdmissionControl(params, {}, MemoryStatsStore(), never, lease_ttl_s=60)


def queued(admission: AdmissionControl[Waiter], count: int, model: str = "m") -> list[Waiter]:
    full = [engine(0.99)]
    waiters = []
    for i in range(count):
        decision, _ = admission.admit(route(f"{model}{i}", model), full, NOW_S)
        assert isinstance(decision, Queue)
        waiters.append(Waiter(route(f"{model}{i}", model)))
        assert admission.enqueue(waiters[-1], decision.deadline_s)
    return waiters


def test_a_dispatch_tick_takes_snapshots_once_per_model_however_many_wait() -> None:
    admission = control()
    queued(admission, 4, "m")
    queued(admission, 1, "other")
    taken: list[str] = []

    def snapshots(waiter: Waiter) -> Sequence[EndpointSnapshot]:
        taken.append(waiter.route.model)
        return [engine(0.99)]  # still full: nobody fits

    expired, dispatched = admission.dispatch(NOW_S + 0.02, snapshots)
    assert (expired, dispatched) == ([], [])
    assert sorted(taken) == ["m", "other"]
    assert admission.queued == {"m": 4, "other": 1}


def test_waiters_leave_the_count_when_dispatched_or_expired() -> None:
    admission = control()
    waiters = queued(admission, 3)
    _, dispatched = admission.dispatch(NOW_S + 0.02, lambda waiter: [engine(0.1)])
    assert dispatched == waiters and admission.queued["m"] == 0
    late = queued(admission, 2)
    expired, _ = admission.dispatch(NOW_S + 3600, lambda waiter: [engine(0.99)])
    assert expired == late and admission.queued["m"] == 0


def test_a_withdrawn_waiter_is_forgotten_once() -> None:
    admission = control()
    (waiter,) = queued(admission, 1)
    admission.withdraw(waiter)
    admission.withdraw(waiter)
    assert admission.queued["m"] == 0 and not len(admission.queue)


def test_after_waiting_only_endpoints_with_headroom_are_eligible() -> None:
    admission = control()
    free, full = engine(0.1, "free"), engine(0.99, "full")
    decision, eligible = admission.admit(route("r"), [free, full], NOW_S)
    assert isinstance(decision, Admit) and eligible == [free]
    assert admission.eligible(route("r"), [full]) == [full]  # none has room: all of them


def test_a_full_queue_refuses_the_most_served_keys_newest_waiter_not_a_quieter_newcomer() -> None:
    admission = control(AdmissionParams(queue_max_size=2, fair_share=True))
    full = [engine(0.99)]
    noisy = [route(f"noisy{i}")._replace(tenant="noisy") for i in range(3)]
    admission.fair.admitted(noisy[0], 5000)  # served before the fleet filled
    for waiting in noisy[:2]:
        decision, _ = admission.admit(waiting, full, NOW_S)
        assert isinstance(decision, Queue)
        assert admission.enqueue(Waiter(waiting), decision.deadline_s)
    refused, _ = admission.admit(noisy[2], full, NOW_S)  # its own key is the most served
    assert isinstance(refused, Reject) and refused.reason == Reason.QUEUE_FULL
    assert admission.take_displaced() == []
    quiet = route("quiet")._replace(tenant="quiet")
    decision, _ = admission.admit(quiet, full, NOW_S)
    assert isinstance(decision, Queue)
    assert admission.take_displaced() == [Waiter(noisy[1])]
    assert admission.enqueue(Waiter(quiet), decision.deadline_s)
    assert admission.queued["m"] == 2
    first_come = control(AdmissionParams(queue_max_size=2, fair_share=False))
    for waiting in noisy[:2]:
        decision, _ = first_come.admit(waiting, full, NOW_S)
        assert isinstance(decision, Queue)
        first_come.enqueue(Waiter(waiting), decision.deadline_s)
    refused, _ = first_come.admit(quiet, full, NOW_S)
    assert isinstance(refused, Reject) and first_come.take_displaced() == []

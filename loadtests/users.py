"""Locust users that replay a plan: one user class per (tenant, SLO class), open loop.

Each class has `fixed_count` users (the plan's pool for its group). A user takes the group's
next planned request, sleeps until its arrival time, sends it streamed, measures it
(`loadtests/stream.py`), writes an exact record and fires custom Locust events
`<group>:ttft|tpot|e2e` (`request_type` LLM, times in ms, length = output tokens). Arrivals
therefore follow the plan whatever the latency (no coordinated omission) as long as the pool
has a free user; a record's `start_s - arrival_s` shows any lag. The exception is a session's
later turn (`PlannedCall.session`): it arrives `think_s` after its previous turn ended
(closed loop per session, loadtests/sessions.py), and its record's arrival is that moment.

`ReplayShape` starts every user at once and ends the test when every planned request has a
record, or `drain_s` after the last arrival at the latest.
"""

from __future__ import annotations

import time
from collections import deque
from typing import ClassVar

import gevent
import requests
from locust import HttpUser, LoadTestShape, constant, task

from gateway.bench.api_events import PATHS, api_headers
from gateway.offline.records import LoadRecord, classify, record_line
from loadtests.plan import Plan, PlannedCall
from loadtests.sessions import LiveSessionTurns
from loadtests.stream import Measured, call_body, measure_call

IDLE_S = 0.25


class Replay:
    """The run's shared state inside the Locust process (one gevent thread at a time)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.queues: dict[str, deque[PlannedCall]] = {}
        for call in plan.calls:
            self.queues.setdefault(call.group, deque()).append(call)
        self.started: float | None = None
        self.in_flight = 0
        self.recorded = 0
        self.sessions = LiveSessionTurns(self.elapsed_s)

    def start(self) -> None:
        if self.started is None:
            self.started = time.perf_counter()
            gevent.spawn(self._inject_faults)

    def take(self, group: str) -> PlannedCall | None:
        queue = self.queues.get(group)
        return queue.popleft() if queue else None

    def elapsed_s(self) -> float:
        return time.perf_counter() - (self.started or time.perf_counter())

    def record(self, record: LoadRecord) -> None:
        # appended and closed at once: a record survives whatever happens to Locust later
        with open(self.plan.records, "a") as out:
            out.write(record_line(record))
        self.recorded += 1

    @property
    def finished(self) -> bool:
        return self.recorded >= len(self.plan.calls)

    def _inject_faults(self) -> None:
        for fault in sorted(self.plan.faults, key=lambda f: f.at_s):
            gevent.sleep(max(0.0, fault.at_s - self.elapsed_s()))
            requests.post(fault.url, json=fault.patch, timeout=5)


class LlmUser(HttpUser):
    abstract = True
    wait_time = constant(0)
    group: ClassVar[str] = ""
    replay: ClassVar[Replay]

    def on_start(self) -> None:
        self.replay.start()

    @task
    def next_request(self) -> None:
        call = self.replay.take(self.group)
        if call is None:
            gevent.sleep(IDLE_S)
            return
        arrival_s = self.replay.sessions.arrival_s(call)
        gevent.sleep(max(0.0, arrival_s - self.replay.elapsed_s()))
        self.replay.in_flight += 1
        try:
            start_s = self.replay.elapsed_s()
            measured = self._send(call)
        finally:
            self.replay.in_flight -= 1
            self.replay.sessions.ended(call)
        self.replay.record(_record(call, arrival_s, start_s, measured))
        self._fire(measured)

    def _send(self, call: PlannedCall) -> Measured:
        plan = self.replay.plan
        headers = api_headers(plan.api) | {
            "authorization": f"Bearer {plan.keys[call.tenant]}",
            "x-slo-class": call.slo_class,
        }
        t0 = time.perf_counter()
        with self.client.post(
            "/v1" + PATHS[plan.api],
            json=call_body(plan.model, call, plan.api),
            headers=headers,
            stream=True,
            catch_response=True,
            name=f"{self.group}:POST",
        ) as response:
            try:
                measured = measure_call(response, t0, api=plan.api)
            except (requests.RequestException, ValueError) as exc:
                measured = _broken(
                    response.status_code, type(exc).__name__, time.perf_counter() - t0
                )
            response.request_meta["response_time"] = measured.e2e_s * 1e3  # E2E, not headers
            if measured.completed:
                response.success()
            else:
                response.failure(measured.reason or f"HTTP {measured.status}")
        return measured

    def _fire(self, measured: Measured) -> None:
        fire = self.environment.events.request.fire
        for name, value in (
            ("ttft", measured.ttft_s),
            ("tpot", measured.tpot_s),
            ("e2e", measured.e2e_s),
        ):
            if value is not None and measured.completed:
                fire(
                    request_type="LLM",
                    name=f"{self.group}:{name}",
                    response_time=value * 1e3,
                    response_length=measured.output_tokens,
                    exception=None,
                    context={},
                )


def _broken(status: int, what: str, e2e_s: float) -> Measured:
    return Measured(status, f"stream broken: {what}", False, "", 0, e2e_s)


def _record(call: PlannedCall, arrival_s: float, start_s: float, m: Measured) -> LoadRecord:
    outcome = classify(m.status, m.reason if m.gateway_reason else None, m.completed)
    return LoadRecord(
        request_id=str(call.index),
        tenant=call.tenant,
        slo_class=call.slo_class,
        arrival_s=arrival_s,
        start_s=start_s,
        status=m.status,
        outcome=outcome,
        reason=m.reason,
        endpoint=m.endpoint,
        attempts=m.attempts,
        prompt_tokens=m.prompt_tokens or call.prompt_tokens,
        output_tokens=m.output_tokens,
        ttft_s=m.ttft_s,
        tpot_s=m.tpot_s,
        e2e_s=m.e2e_s,
        cached_tokens=m.cached_tokens,
        decision=m.decision,
        predicted_ttft_p95_s=m.predicted_p95s[0],
        predicted_tpot_p95_s=m.predicted_p95s[1],
    )


def user_classes(replay: Replay) -> list[type[LlmUser]]:
    """One LlmUser subclass per group, named after it, with the plan's pool as fixed_count."""
    LlmUser.replay = replay
    made: list[type[LlmUser]] = []
    for group, users in sorted(replay.plan.pools.items()):
        name = "User_" + "".join(ch if ch.isalnum() else "_" for ch in group)
        made.append(type(name, (LlmUser,), {"group": group, "fixed_count": users}))
    return made


class ReplayShape(LoadTestShape):
    """All users at once; stop when every request has a record or at the drain deadline."""

    replay: ClassVar[Replay]

    def tick(self) -> tuple[int, float] | None:
        plan = self.replay.plan
        if self.replay.finished or self.replay.elapsed_s() > plan.duration_s + plan.drain_s:
            return None
        users = sum(plan.pools.values())
        return users, float(users)

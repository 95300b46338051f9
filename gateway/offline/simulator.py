"""The offline simulator: a planned workload through the gateway's decisions, in virtual time.

Discrete events on one heap, in time order (ties in insertion order):
    arrival      the next planned request reaches the gateway (`GatewayModel`: tenant limits,
                 candidates, admission, the policy's ranking), then its first attempt
    turn         a session's later turn arrives, `think_s` after its previous turn ended
                 (closed loop per session, as live: gateway/offline/session_turns.py)
    step end     an engine finishes an `EngineModel.step()`: its tokens are delivered (first
                 tokens, running streams' stretches and finished requests, observed as the live
                 relay does: gateway/core/progress.py) and the next step starts at once
    provider end a hosted request's last token (its latencies were drawn when it started)
    retry        an attempt after a Retry-After wait (only when the ranking has one endpoint)
    timeout      a hung attempt reaching the gateway's first-byte timeout
    fault        a scenario fault patch, applied to a member's `FaultState`
    background   the gateway's periodic work, at its configured intervals: the shared-view
                 refresh, the engine scrape, the health probes, the fairness counters' sync
                 (every second), and the admission queue's dispatcher (every 20 ms while
                 requests wait)
Attempts fail over along the ranking before the first token, as `gateway/server/router.py` does
(at most `max_attempts`, at once when there is another endpoint, else after Retry-After).
Requests still running `drain_s` after the scenario's duration are recorded as errors
(`unfinished`), and so are a session's later turns never sent by then.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.core import failover
from gateway.core.admission_control import DISPATCH_TICK_S
from gateway.core.decision_pipeline import Unavailable
from gateway.errors import AttemptFailed, GatewayError, Rejected
from gateway.offline.flight import Flight
from gateway.offline.gateway_model import GatewayModel, Queued, offline_config
from gateway.offline.members import Refusal, VirtualEngine, VirtualProvider, scraped_state
from gateway.offline.records import LoadRecord, served, unserved, whole_answer
from gateway.offline.scenario import FaultEvent, Scenario
from gateway.offline.session_turns import SessionTurns
from gateway.offline.trace import PlannedRequest
from gateway.telemetry.record import Finished
from gateway.telemetry.usage_counters import FLUSH_EVERY_S
from policies.admission import Queue, Reason, Reject
from policies.base import Ranking, RouteRequest

STEP, PROVIDER_END, RETRY, TIMEOUT, FAULT, REFRESH, SCRAPE, PROBE, DISPATCH, TURN, FAIR = range(11)


@dataclass(frozen=True, slots=True)
class SimResult:
    records: list[LoadRecord]
    preemptions: int
    wall_s: float
    cpu_s: float  # on a shared machine the CPU time says more than the wall time
    events: int

    @property
    def requests_per_s(self) -> float:
        return len(self.records) / self.wall_s if self.wall_s > 0 else math.inf


class Simulator:
    def __init__(
        self,
        scenario: Scenario,
        plan: Sequence[PlannedRequest],
        policy: Mapping[str, Any],
        *,
        seed: int = 0,
    ) -> None:
        self.scenario = scenario
        self.plan = plan
        self.config = offline_config(scenario, policy)
        self.gateway = GatewayModel(self.config, seed=seed)
        self.engines = {e.id: VirtualEngine(e, seed + i) for i, e in enumerate(scenario.engines)}
        self.providers = {
            p.id: VirtualProvider(p, seed + 1000 + i) for i, p in enumerate(scenario.providers)
        }
        self.end_s = scenario.duration_s + scenario.drain_s
        self._events: list[tuple[float, int, int, Any]] = []
        self._order = itertools.count()
        self._records: list[LoadRecord | None] = [None] * len(plan)
        self.turns = SessionTurns(plan)
        self._flights: dict[str, Flight] = {}
        self._seq = itertools.count()
        self._dispatching = False
        self._targets = {name: c.target(name) for name, c in self.config.classes.items()}
        self.events = 0

    def run(self) -> SimResult:
        started, cpu_started = time.perf_counter(), time.process_time()
        for fault in self.scenario.faults:
            self._push(fault.at_s, FAULT, fault)
        for kind in (REFRESH, SCRAPE, PROBE):  # the lifespan starts them all at once
            self._push(0.0, kind, None)
        self._push(FLUSH_EVERY_S, FAIR, None)  # its loop sleeps first
        for index, planned in enumerate(self.plan):
            if self.turns.waits(index):
                continue  # it arrives when its previous turn ends (a TURN event)
            self._until(planned.arrival_s)
            self.gateway.now_s = planned.arrival_s
            self._arrive(index, planned)
        self._until(self.end_s)
        records = [
            r or unserved(str(i), self.plan[i], 0, "unfinished")
            for i, r in enumerate(self._records)
        ]
        preemptions = sum(e.model.preemptions_total for e in self.engines.values())
        wall_s, cpu_s = time.perf_counter() - started, time.process_time() - cpu_started
        return SimResult(records, preemptions, wall_s, cpu_s, self.events)

    # -- the event loop ----------------------------------------------------------------------

    def _push(self, at_s: float, kind: int, payload: Any) -> None:
        heapq.heappush(self._events, (at_s, next(self._order), kind, payload))

    def _until(self, limit_s: float) -> None:
        events = self._events
        while events and events[0][0] <= limit_s:
            now_s, _, kind, payload = heapq.heappop(events)
            self.gateway.now_s = now_s
            self.events += 1
            if kind == STEP:
                self._step_end(payload, now_s)
            elif kind == PROVIDER_END:
                self._provider_end(payload, now_s)
            else:
                self._other(kind, payload, now_s)

    def _other(self, kind: int, payload: Any, now_s: float) -> None:
        if kind == RETRY:
            self._attempt(payload, now_s)
        elif kind == TIMEOUT:
            self._failed(
                payload, AttemptFailed(payload.endpoint_id, failover.FIRST_BYTE_TIMEOUT), now_s
            )
        elif kind == FAULT:
            self._fault(payload, now_s)
        elif kind == DISPATCH:
            self._dispatch_queue(now_s)
        elif kind == TURN:
            self._arrive(*payload)
        else:
            self._background(kind, now_s)

    def _background(self, kind: int, now_s: float) -> None:
        state = self.config.state
        if kind == REFRESH:
            self.gateway.refresh()
            interval_s = state.refresh_s
        elif kind == FAIR:
            self.gateway.sync_fair_share(now_s)
            interval_s = FLUSH_EVERY_S
        elif kind == SCRAPE:
            for engine_id, engine in self.engines.items():
                self.gateway.scrapes.put(engine_id, scraped_state(engine.snapshot()), now_s)
            interval_s = state.scrape_interval_s
        else:
            healthy = {i: e.healthy() for i, e in self.engines.items()}
            healthy |= {i: p.healthy() for i, p in self.providers.items()}
            self.gateway.probe(healthy, now_s)
            interval_s = state.health_interval_s
        if now_s + interval_s <= self.end_s:
            self._push(now_s + interval_s, kind, None)

    # -- arrivals and admission --------------------------------------------------------------

    def _arrive(self, index: int, planned: PlannedRequest) -> None:
        now_s = planned.arrival_s
        route = RouteRequest(
            request_id=str(index),
            model=self.scenario.model,
            tenant=planned.tenant,
            slo=self._targets[planned.slo_class],
            prompt_tokens=planned.prompt_tokens,
            max_tokens=planned.output_tokens,
            stream=planned.stream,
            seq=next(self._seq),
        )
        route = self.gateway.annotate(route, getattr(planned, "body", None))
        limited = self.gateway.tenant_check(route, now_s)
        if limited is not None:
            self._shed(index, route, limited, now_s)
            return
        decided = self.gateway.pipeline.decide(route, now_s)
        for item in decided.displaced:  # as `LiveAdmission._refuse_displaced`
            self._end(item.index, 503, Reason.QUEUE_FULL, now_s, item.route, shed=True)
        outcome = decided.outcome
        if isinstance(outcome, Unavailable):
            self._end(index, 503, outcome.value, now_s, route)
        elif isinstance(outcome, Reject):
            self._shed(index, route, outcome, now_s)
        elif isinstance(outcome, Queue):
            self._enqueue(index, route, outcome, now_s)
        else:
            self._send(index, route, outcome, now_s)

    def _enqueue(self, index: int, route: RouteRequest, decision: Queue, now_s: float) -> None:
        if not self.gateway.admission.enqueue(Queued(index, route), decision.deadline_s):
            self._end(index, 503, Reason.QUEUE_FULL, now_s, route, shed=True)
        elif not self._dispatching:  # the dispatcher wakes at once, then ticks
            self._dispatching = True
            self._push(now_s, DISPATCH, None)

    def _dispatch_queue(self, now_s: float) -> None:
        """`LiveAdmission._dispatch`: expire, then dispatch a few by deadline; each dispatched
        request then takes fresh snapshots, as a woken waiter does."""
        pipeline = self.gateway.pipeline
        expired, dispatched = pipeline.dispatch(now_s)
        for item in expired:
            self._end(item.index, 503, Reason.DEADLINE_UNREACHABLE, now_s, item.route, shed=True)
        for item in dispatched:
            resumed = pipeline.resume(item.route, now_s)
            if isinstance(resumed, Unavailable):
                self._end(item.index, 503, resumed.value, now_s, item.route)
            else:
                self._send(item.index, item.route, resumed, now_s)
        self._dispatching = bool(self.gateway.admission.queue)
        if self._dispatching:
            self._push(now_s + DISPATCH_TICK_S, DISPATCH, None)

    def _shed(self, index: int, route: RouteRequest, reject: Reject, now_s: float) -> None:
        self._end(index, reject.status, reject.reason.value, now_s, route, shed=True)

    def _send(self, index: int, route: RouteRequest, ranking: Ranking, now_s: float) -> None:
        order = tuple(s.endpoint_id for s in ranking.endpoints)
        flight = Flight(index, route, order, ranking.reason, now_s, ranking.predictions)
        self._attempt(flight, now_s)

    # -- attempts ----------------------------------------------------------------------------

    def _attempt(self, flight: Flight, now_s: float) -> None:
        flight.attempt += 1
        endpoint_id = flight.order[(flight.attempt - 1) % len(flight.order)]
        flight.endpoint_id, flight.sent_s = endpoint_id, now_s
        self.gateway.take(endpoint_id, flight.route, flight.predicted)
        route = flight.route
        output_tokens = route.max_tokens or 1
        engine = self.engines.get(endpoint_id)
        text = getattr(self.plan[flight.index], "text", None)
        if engine is not None:
            refusal = engine.refuse(route.prompt_tokens, output_tokens)
            if refusal is None:
                engine.submit(route.request_id, route.prompt_tokens, output_tokens, text)
                self._flights[route.request_id] = flight
                if not engine.stepping:
                    self._step(engine, now_s)
                return
        else:
            provider = self.providers[endpoint_id]
            refusal = provider.refuse()
            if refusal is None:
                served = provider.start(route.prompt_tokens, output_tokens, now_s, text)
                flight.first_s, flight.limit_headers = served.first_s, served.headers
                flight.cached = served.cached
                self._push(served.last_s, PROVIDER_END, flight)
                return
        self._refused(flight, refusal, now_s)

    def _refused(self, flight: Flight, refusal: Refusal, now_s: float) -> None:
        if refusal.status == 0:
            self._push(now_s + self.gateway.server.first_byte_timeout_s, TIMEOUT, flight)
        elif refusal.status in failover.CLIENT_FAULT_STATUSES:
            # relayed to the client as sent; the endpoint answered, so it counts as healthy
            self._observe(flight, now_s, "client_error", refusal.status)
            self._end(
                flight.index,
                refusal.status,
                "upstream_client_error",
                now_s,
                flight.route,
                attempts=flight.attempt,
            )
        else:
            self._failed(flight, self.gateway.classify(flight.endpoint_id, refusal, now_s), now_s)

    def _failed(self, flight: Flight, failure: AttemptFailed, now_s: float) -> None:
        """Fail over along the ranking by the router's rules (gateway/core/failover.py)."""
        self.gateway.failed_attempt(flight.endpoint_id, flight.route, failure, now_s)
        server, order = self.gateway.server, flight.order
        if failover.gives_up(flight.attempt, failure, order[flight.attempt % len(order)], server):
            self._give_up(flight, failover.final_error(failure), now_s)
        elif (wait_s := failover.backoff_s(len(order), failure, server)) > 0:
            self._push(now_s + wait_s, RETRY, flight)
        else:
            self._attempt(flight, now_s)

    def _give_up(self, flight: Flight, error: GatewayError, now_s: float) -> None:
        shed = isinstance(error, Rejected)  # every endpoint rate limited: a 429 to retry later
        index, reason, attempts = flight.index, error.code or "upstream_failed", flight.attempt
        self._end(index, error.status, reason, now_s, flight.route, shed=shed, attempts=attempts)

    # -- serving -----------------------------------------------------------------------------

    def _step(self, engine: VirtualEngine, now_s: float) -> None:
        duration_s = engine.step(now_s)
        if duration_s > 0:
            self._push(now_s + duration_s, STEP, engine)
        else:
            engine.stepping = False

    def _step_end(self, engine: VirtualEngine, now_s: float) -> None:
        result = engine.pending
        engine.stepping = False
        if result is not None:
            flights, streamed = self._flights, self.gateway.streamed
            for request_id, cached in result.prefix_hits:
                if (hit := flights.get(request_id)) is not None:
                    hit.cached = cached
            for request_id, token in result.tokens_emitted:
                progress = (flight := flights[request_id]).progress
                if not flight.route.stream:
                    continue  # a whole answer: the gateway sees nothing before its end
                if token == 0:
                    flight.first_s = now_s
                elif now_s < progress.due_s:
                    continue  # most tokens: no stretch due (gateway/core/progress.py)
                sent_s, endpoint_id = flight.sent_s, flight.endpoint_id
                streamed(endpoint_id, flight.route, progress, token + 1, now_s - sent_s, now_s)
            for request_id in result.finished:
                self._complete(flights.pop(request_id), now_s)
        if engine.model.has_work:
            self._step(engine, now_s)

    def _provider_end(self, flight: Flight, now_s: float) -> None:
        self.providers[flight.endpoint_id].in_flight -= 1
        self._complete(flight, now_s)

    def _complete(self, flight: Flight, now_s: float) -> None:
        route, planned = flight.route, self.turns.sent[flight.index]
        first_s = flight.first_s if flight.first_s is not None else now_s
        tokens = route.max_tokens or 1
        tpot_s = (now_s - first_s) / (tokens - 1) if tokens > 1 else None
        self._observe(flight, now_s, "ok", 200, first_s=first_s, tpot_s=tpot_s)
        where = (flight.endpoint_id, flight.attempt, tokens, flight.decision)
        queued_s = flight.routed_s - planned.arrival_s
        record = served(
            planned, route.request_id, where, first_s, now_s, tpot_s, flight.cached, queued_s,
            _predicted_p95s(flight, planned.arrival_s),
        )  # fmt: skip
        self._records[flight.index] = record if route.stream else whole_answer(record)
        self._turn_over(flight.index, now_s)

    def _observe(
        self,
        flight: Flight,
        now_s: float,
        outcome: str,
        status: int,
        *,
        first_s: float | None = None,
        tpot_s: float | None = None,
    ) -> None:
        """What the gateway measured for the attempt that answered (`gateway.core.outcomes`)."""
        route = flight.route
        seen_s = first_s if route.stream else None  # a whole answer shows no first token
        result = Finished(
            outcome=outcome,
            status=status,
            prompt_tokens=route.prompt_tokens,
            output_tokens=(route.max_tokens or 0) if first_s is not None else 0,
            ttft_s=seen_s - flight.sent_s if seen_s is not None else None,
            tpot_s=tpot_s if route.stream else None,
            e2e_s=now_s - flight.sent_s,
            cached_tokens=flight.cached,
        )
        (progress := flight.progress).tokens = result.output_tokens  # with the tokens skipped
        progress.last_s, headers = now_s, flight.limit_headers
        self.gateway.finished(flight.endpoint_id, route, result, headers, now_s, progress)

    # -- the rest ----------------------------------------------------------------------------

    def _end(
        self,
        index: int,
        status: int,
        reason: str,
        now_s: float,
        route: RouteRequest,
        *,
        shed: bool = False,
        attempts: int = 0,
    ) -> None:
        planned = self.turns.sent[index]
        self.gateway.request_done(route, now_s)
        self._records[index] = unserved(
            str(index),
            planned,
            status,
            reason,
            shed=shed,
            attempts=attempts,
            e2e_s=now_s - planned.arrival_s,
        )
        self._turn_over(index, now_s)

    def _turn_over(self, index: int, now_s: float) -> None:
        """The request ended: its session's next turn arrives `think_s` later, within the run."""
        following = self.turns.ended(index, now_s)
        if following is not None and following[1].arrival_s <= self.end_s:
            self._push(following[1].arrival_s, TURN, following)

    def _fault(self, fault: FaultEvent, now_s: float) -> None:
        member = self.engines.get(fault.member) or self.providers[fault.member]
        member.faults.update(fault.patch, now_s=now_s)


def _predicted_p95s(flight: Flight, arrival_s: float) -> tuple[float | None, float | None]:
    """The served attempt's predicted TTFT and TPOT p95s, TTFT from the arrival as the record
    counts it (the wait before the attempt added)."""
    predicted = flight.predicted
    if predicted is None:
        return None, None
    return flight.sent_s - arrival_s + predicted.ttft_p95_s, predicted.tpot_p95_s

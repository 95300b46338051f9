"""The decision pipeline (gateway/core/decision_pipeline.py) and its admission on the live
request path, on the wall clock: a request that must wait does so as a future in the deadline
queue, which a dispatcher task (owned by the app lifespan) releases by deadline, within a class
least-served fairness key first; refusals are counted and raised as the error the client gets.
Tenant limits and budgets are checked and settled here too (one store call each way). The
fairness counters go to the shared store and come back every second (`sync_fair_share`), off
the request path."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial

from gateway.config.settings import Api, Price, TenantBudget, TenantLimits
from gateway.core.accounting import UsageBatch
from gateway.core.admission_control import (
    BEST_EFFORT,
    CHARGE_EVERY_S,
    DISPATCH_TICK_S,
    AdmissionControl,
    TenantTicket,
    rejection,
)
from gateway.core.decision_pipeline import DecisionPipeline, Unavailable
from gateway.core.fair_charges import FairShare
from gateway.errors import NoEndpointAvailable, Rejected
from gateway.state.background import Background, run_now
from gateway.state.memory_store import MemoryStatsStore
from gateway.state.redis_store import FAILURES
from gateway.state.resilient import writes_at_once
from gateway.state.store import StatsStore
from gateway.state.usage import UsageLine
from gateway.telemetry.metrics import Metrics, log
from gateway.telemetry.record import RequestRecord, Reservation
from gateway.telemetry.usage_counters import FLUSH_EVERY_S, flush_every
from gateway.upstream.grammar import StreamGrammar
from gateway.watch.endpoints import Registry
from policies.admission import AdmissionParams, Reason, Reject
from policies.base import Ranking, RouteRequest


@dataclass(eq=False)
class Waiter:
    """A request waiting in the deadline queue, released through `done`."""

    route: RouteRequest
    api: Api
    owner: str | None
    done: asyncio.Future[None] = field(default_factory=asyncio.Future)


def admission_control(
    params: AdmissionParams,
    limits: Mapping[str, TenantLimits],
    store: StatsStore,
    background: Background,
    lease_ttl_s: float,
    budgets: Mapping[str, TenantBudget | None] | None = None,
    weights: Mapping[str, float] | None = None,
) -> AdmissionControl[Waiter]:
    """Admission's state for the live path over `store`; `weights`: each tenant's fairness
    weight (1 where not named)."""
    # Settlements only queue for the write-behind (or finish in memory): no task needed.
    write = run_now if writes_at_once(store) else background.spawn
    # Over memory (one replica) usage with nothing exact to settle is batched: every read
    # of it settles the batch first. Over Redis other replicas read it, so it goes at once.
    batch = UsageBatch() if isinstance(store, MemoryStatsStore) else None
    return AdmissionControl(
        params,
        limits,
        store,
        background.spawn,
        lease_ttl_s,
        budgets,
        write,
        batch,
        FairShare(weights),
    )


class LiveAdmission:
    """The decision pipeline and its admission on the live request path, on the wall clock."""

    def __init__(
        self,
        pipeline: DecisionPipeline[Waiter],
        metrics: Metrics,
        registry: Registry,
        budgets: Mapping[str, TenantBudget | None] | None = None,
    ) -> None:
        """`registry`: the endpoints, whose prices a budgeted request's cost is predicted at."""
        self.pipeline = pipeline
        self.control = pipeline.admission
        self.registry = registry
        self.metrics = metrics
        self.states = self.control.states
        self._budgeted = _budgeted(budgets)  # tenants whose soft alerts are listened for
        self._wake = asyncio.Event()

    def reconfigure(
        self,
        params: AdmissionParams,
        limits: Mapping[str, TenantLimits],
        budgets: Mapping[str, TenantBudget | None] | None = None,
        weights: Mapping[str, float] | None = None,
    ) -> None:
        self.control.reconfigure(params, limits, budgets)
        self.control.fair.weights = weights or {}
        self._budgeted = _budgeted(budgets)

    def footprint(self, route: RouteRequest) -> int:
        return self.control.footprint(route)

    async def admit(
        self, route: RouteRequest, api: Api, owner: str | None
    ) -> tuple[Ranking, bool, float]:
        """The ranking this request goes on (`DecisionPipeline.decide`), whether it waited for
        fairness (later requests of its class went first), and how long it waited in the
        deadline queue: when it must wait, it is then ranked on the candidates of that moment
        (`resume`). Refused: raised at once."""
        decided = self.pipeline.decide(route, time.time(), api, owner)
        self._refuse_displaced(decided.displaced)
        outcome = decided.outcome
        if isinstance(outcome, Unavailable):
            raise self._unavailable(route, outcome, api, owner)
        if isinstance(outcome, Reject):
            raise self._shed(route, outcome.status, outcome.reason, outcome.retry_after_s)
        if isinstance(outcome, Ranking):
            if outcome.reason == BEST_EFFORT:
                self.metrics.best_effort.labels(route.slo.name, route.tenant).inc()
            return outcome, False, 0.0
        started = time.perf_counter()
        deferred = await self._wait(Waiter(route, api, owner), outcome.deadline_s)
        waited_s = time.perf_counter() - started
        resumed = self.pipeline.resume(route, time.time(), api, owner)
        if isinstance(resumed, Unavailable):
            raise self._unavailable(route, resumed, api, owner)
        return resumed, deferred, waited_s

    def _refuse_displaced(self, displaced: list[Waiter]) -> None:
        """Waiters whose place in a full queue a less-served key took: refused as the full
        queue would have refused them."""
        retry_s = self.control.params.retry_after_s
        for waiter in displaced:
            error = self._shed(waiter.route, 503, Reason.QUEUE_FULL, retry_s)
            if not waiter.done.done():
                waiter.done.set_exception(error)

    def _unavailable(
        self, route: RouteRequest, why: Unavailable, api: Api, owner: str | None
    ) -> NoEndpointAvailable:
        if why is Unavailable.NONE_RANKED:
            return NoEndpointAvailable(
                "The routing policy found no endpoint for this request.", code=why.value
            )
        wait_s = self.pipeline.next_available_in_s(route.model, time.time(), api)
        retry_after = {"retry-after": str(max(1, math.ceil(wait_s)))}
        if owner is not None:
            return NoEndpointAvailable(
                f"The endpoint that stored the previous response ({owner!r}) is out of "
                "rotation right now; retry shortly (it is never served elsewhere).",
                code="owner_unavailable",
                headers=retry_after,
            )
        return NoEndpointAvailable(
            f"No endpoint serving {route.model!r} through this API is available right now; "
            "retry shortly.",
            code=why.value,
            headers=retry_after,
        )

    def _shed(self, route: RouteRequest, status: int, reason: Reason, retry_s: float) -> Rejected:
        self.metrics.shed.labels(route.slo.name, route.tenant, reason.value).inc()
        return rejection(status, reason, retry_s)

    async def _wait(self, waiter: Waiter, deadline_s: float) -> bool:
        """Wait in the deadline queue until dispatched; whether it waited for fairness."""
        route = waiter.route
        if not self.control.enqueue(waiter, deadline_s):
            raise self._shed(route, 503, Reason.QUEUE_FULL, self.control.params.retry_after_s)
        self.metrics.queued.labels(route.slo.name).inc()
        self.metrics.queue_depth.set(len(self.control.queue))
        self._wake.set()
        started = time.time()
        try:
            await waiter.done
        finally:
            deferred = self.control.waited_for_fairness(route)  # the note dropped either way
            self.control.withdraw(waiter)
            self.metrics.queue_depth.set(len(self.control.queue))
            self.metrics.queue_wait.labels(route.slo.name, route.tenant).observe(
                time.time() - started
            )
        if deferred:
            self.metrics.fair_waits.labels(route.slo.name, route.tenant).inc()
        return deferred

    def flush_usage(self) -> None:
        """Settle the batched usage (before anything reads it)."""
        self.control.flush_usage()

    async def settle_batches(self) -> None:
        """The batched usage settled every second, and once more at shutdown (owned by the
        runtime, like `run`)."""
        await flush_every(self.flush_usage)

    async def sync_fair_share(self) -> None:
        """The fairness counters sent and read back every second (owned by the runtime)."""
        fair = self.control.fair
        while True:
            await asyncio.sleep(FLUSH_EVERY_S)
            try:
                await fair.sync(self.control.store, time.time())
            except FAILURES as exc:
                log.debug("fairness counters not synced: %r", exc)
            for slo_class, counters in fair.shared.items():
                for key, tokens in counters.tokens.items():
                    self.metrics.fair_share.labels(slo_class, key).set(tokens)

    async def run(self) -> None:
        """The dispatcher, owned by the app lifespan: expire, then dispatch by deadline."""
        while True:
            if not len(self.control.queue):
                self._wake.clear()
                await self._wake.wait()
            self._dispatch(time.time())
            await asyncio.sleep(DISPATCH_TICK_S)

    def _dispatch(self, now: float) -> None:
        expired, dispatched = self.pipeline.dispatch(now)
        for waiter in expired:
            error = self._shed(waiter.route, 503, Reason.DEADLINE_UNREACHABLE, 1.0)
            if not waiter.done.done():
                waiter.done.set_exception(error)
        for waiter in dispatched:
            if not waiter.done.done():
                waiter.done.set_result(None)

    async def admit_tenant(self, route: RouteRequest, record: RequestRecord) -> None:
        """Noted in the record: the reservation to settle and the limit headers, which every
        answer carries (a refusal too: the middleware adds them)."""
        prices = self._prices(route, record)
        ticket = await self.control.tenant_ticket(route, time.time(), prices)
        record.reservation = _reservation(ticket)
        record.limit_headers = ticket.headers
        rejected = ticket.reject
        if rejected is None and record.key_subject is not None:
            rejected = await self._admit_key(route, record, record.key_subject)
        if rejected is not None:
            raise self._shed(route, rejected.status, rejected.reason, rejected.retry_after_s)

    def _prices(self, route: RouteRequest, record: RequestRecord) -> list[Price]:
        """The prices of the endpoints that may serve `route`, of its model or of a model it
        may fall back to (none asked for when its tenant has no budget: only a budget needs
        its cost). A fallback can be dearer, and the hold must cover what it may cost."""
        if route.tenant not in self._budgeted:
            return []
        models = {route.model, *record.fallbacks, *record.context_fallbacks}
        endpoints = self.registry.endpoints.values()
        return [e.price for e in endpoints if not models.isdisjoint(e.models)]

    def charging(
        self, route: RouteRequest, record: RequestRecord, seen: Callable[[StreamGrammar], float]
    ) -> Callable[[StreamGrammar], float]:
        """`seen` (what the relay tells of a running stream), also charging the stream's tokens
        to its tenant's tokens window, and its key's when the key has its own, as they come, at
        most every CHARGE_EVERY_S, so a stream is counted in the windows it runs in and refuses
        new requests once one is spent."""
        if record.reservation.slot is None and record.key_reservation.slot is None:
            return seen
        due_s = time.monotonic() + CHARGE_EVERY_S
        keyed = route._replace(tenant=record.key_subject or route.tenant)

        def charged(watch: StreamGrammar) -> float:
            nonlocal due_s
            next_s = seen(watch)
            if time.monotonic() >= due_s:
                due_s = time.monotonic() + CHARGE_EVERY_S
                used, now = route.prompt_tokens + watch.output_tokens, time.time()
                charge = self.control.charge_streamed
                ticket = charge(route, _ticket(record.reservation), used, now)
                record.reservation = _reservation(ticket)
                ticket = charge(keyed, _ticket(record.key_reservation), used, now)
                record.key_reservation = _reservation(ticket)
            return next_s

        return charged

    async def _admit_key(
        self, route: RouteRequest, record: RequestRecord, subject: str
    ) -> Reject | None:
        """An API key's own limits and budget, counted like a tenant's under its subject (a
        second round trip, only for a key that has them: none otherwise); a key refused gives
        its tenant's admission back."""
        keyed = route._replace(tenant=subject)
        ticket = await self.control.tenant_ticket(keyed, time.time(), self._prices(keyed, record))
        record.limit_headers = ticket.headers or record.limit_headers
        if ticket.reject is None:
            record.key_reservation = _reservation(ticket)
            return None
        now = time.time()
        self.control.finished(route, now)
        self.control.settle(route, _ticket(record.reservation), None, now)
        return ticket.reject

    def finished(self, route: RouteRequest, record: RequestRecord) -> None:
        """The tenant's (and a limited key's) concurrency slot back, and the request settled
        on what it used (its fairness charge too)."""
        now = time.time()
        self.control.finished(route, now)
        alerted = partial(self._alert, route) if route.tenant in self._budgeted else None
        line = usage_line(route, record)
        self.control.settle(route, _ticket(record.reservation), line, now, alerted)
        if line is None:
            self.control.served(route, 0, 0, 0)
        else:
            prompt, cached, output = line.prompt_tokens, line.cached_tokens, line.completion_tokens
            self.control.served(route, prompt, cached, output)
        if record.key_subject is not None:
            keyed = route._replace(tenant=record.key_subject)
            self.control.finished(keyed, now)
            self.control.settle(keyed, _ticket(record.key_reservation), line, now)

    def _alert(self, route: RouteRequest, window: str) -> None:
        budget = self.control.budgets.get(route.tenant)
        fraction = budget.soft_alert_fraction if budget else None
        log.warning(
            "tenant %r crossed %s of its %s budget (UTC %s)",
            route.tenant,
            f"{fraction:.0%}" if fraction else "the soft alert",
            "daily" if window == "day" else "monthly",
            window,
        )
        self.metrics.budget_alerts.labels(route.tenant, window).inc()


def _ticket(kept: Reservation) -> TenantTicket:
    """An admission as the record keeps it."""
    return TenantTicket(
        None, kept.slot, kept.reserved, charged=kept.charged, held_pusd=kept.held_pusd
    )


def _reservation(ticket: TenantTicket) -> Reservation:
    """What the record keeps of an admission."""
    return Reservation(ticket.slot, ticket.reserved, ticket.charged, ticket.held_pusd)


def _budgeted(budgets: Mapping[str, TenantBudget | None] | None) -> frozenset[str]:
    return frozenset(name for name, budget in (budgets or {}).items() if budget is not None)


def usage_line(route: RouteRequest, record: RequestRecord) -> UsageLine | None:
    """What the request used (None when no upstream answered): see gateway/core/accounting.py."""
    result = record.result
    if result is None or record.endpoint_id is None:
        return None
    return UsageLine(
        route.slo.name,
        route.model,
        record.endpoint_id,
        result.prompt_tokens,
        result.cached_tokens or 0,
        result.output_tokens,
        record.cost_pusd,
    )

"""`AdmissionControl` (gateway/core/admission_control.py) on the live request path, on the wall
clock: a request that must wait does so as a future in the deadline queue, which a dispatcher
task (owned by the app lifespan) releases by deadline; refusals are counted and raised as the
error the client gets."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

from gateway.config.settings import TenantBudget, TenantLimits
from gateway.core.admission_control import (
    DISPATCH_TICK_S,
    AdmissionControl,
    Snapshots,
    TenantTicket,
    rejection,
)
from gateway.core.usage import UsageBatch
from gateway.errors import Rejected
from gateway.state.background import Background, run_now
from gateway.state.memory_store import MemoryStatsStore
from gateway.state.resilient import writes_at_once
from gateway.state.store import StatsStore
from gateway.state.usage import UsageLine
from gateway.telemetry.metrics import Metrics, log
from gateway.telemetry.record import RequestRecord
from gateway.telemetry.usage_counters import flush_every
from policies.admission import AdmissionParams, Admit, Reason, Reject
from policies.base import EndpointSnapshot, RouteRequest


@dataclass(eq=False)
class _Waiter:
    route: RouteRequest
    snapshots: Snapshots
    done: asyncio.Future[None] = field(default_factory=asyncio.Future)


class Admission:
    """`AdmissionControl` on the live request path, on the wall clock."""

    def __init__(
        self,
        params: AdmissionParams,
        limits: Mapping[str, TenantLimits],
        store: StatsStore,
        metrics: Metrics,
        background: Background,
        lease_ttl_s: float,
        budgets: Mapping[str, TenantBudget | None] | None = None,
    ) -> None:
        # Settlements only queue for the write-behind (or finish in memory): no task needed.
        write = run_now if writes_at_once(store) else background.spawn
        # Over memory (one replica) usage with nothing exact to settle is batched: every read
        # of it settles the batch first. Over Redis other replicas read it, so it goes at once.
        batch = UsageBatch() if isinstance(store, MemoryStatsStore) else None
        self.control: AdmissionControl[_Waiter] = AdmissionControl(
            params, limits, store, background.spawn, lease_ttl_s, budgets, write, batch
        )
        self.metrics = metrics
        self.states = self.control.states
        self._budgeted = _budgeted(budgets)  # tenants whose soft alerts are listened for
        self._wake = asyncio.Event()

    def reconfigure(
        self,
        params: AdmissionParams,
        limits: Mapping[str, TenantLimits],
        budgets: Mapping[str, TenantBudget | None] | None = None,
    ) -> None:
        self.control.reconfigure(params, limits, budgets)
        self._budgeted = _budgeted(budgets)

    def footprint(self, route: RouteRequest) -> int:
        return self.control.footprint(route)

    async def admit(
        self, route: RouteRequest, current: Sequence[EndpointSnapshot], snapshots: Snapshots
    ) -> list[EndpointSnapshot]:
        """The candidates this request may use now (`current`); waits in the deadline queue
        if it must, then takes fresh `snapshots()`."""
        decision, eligible = self.control.admit(route, current, time.time())
        if isinstance(decision, Reject):
            raise self._shed(route, decision.status, decision.reason, decision.retry_after_s)
        if isinstance(decision, Admit):
            return eligible
        current = await self._wait(route, decision.deadline_s, snapshots)
        return self.control.eligible(route, current)

    def _shed(self, route: RouteRequest, status: int, reason: Reason, retry_s: float) -> Rejected:
        self.metrics.shed.labels(route.slo.name, route.tenant, reason.value).inc()
        return rejection(status, reason, retry_s)

    async def _wait(
        self, route: RouteRequest, deadline_s: float, snapshots: Snapshots
    ) -> Sequence[EndpointSnapshot]:
        waiter = _Waiter(route, snapshots)
        if not self.control.enqueue(waiter, deadline_s):
            raise self._shed(route, 503, Reason.QUEUE_FULL, self.control.params.retry_after_s)
        self.metrics.queued.labels(route.slo.name).inc()
        self.metrics.queue_depth.set(len(self.control.queue))
        self._wake.set()
        try:
            await waiter.done
        finally:
            self.control.withdraw(waiter)
            self.metrics.queue_depth.set(len(self.control.queue))
        return snapshots()

    def flush_usage(self) -> None:
        """Settle the batched usage (before anything reads it)."""
        self.control.flush_usage()

    async def settle_batches(self) -> None:
        """The batched usage settled every second, and once more at shutdown (owned by the
        runtime, like `run`)."""
        await flush_every(self.flush_usage)

    async def run(self) -> None:
        """The dispatcher, owned by the app lifespan: expire, then dispatch by deadline."""
        while True:
            if not len(self.control.queue):
                self._wake.clear()
                await self._wake.wait()
            self._dispatch(time.time())
            await asyncio.sleep(DISPATCH_TICK_S)

    def _dispatch(self, now: float) -> None:
        expired, dispatched = self.control.dispatch(now, lambda waiter: waiter.snapshots())
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
        ticket = await self.control.tenant_ticket(route, time.time())
        record.reserved_slot, record.reserved_tokens = ticket.slot, ticket.reserved
        record.limit_headers = ticket.headers
        rejected = ticket.reject
        if rejected is None and record.key_subject is not None:
            rejected = await self._admit_key(route, record, record.key_subject)
        if rejected is not None:
            raise self._shed(route, rejected.status, rejected.reason, rejected.retry_after_s)

    async def _admit_key(
        self, route: RouteRequest, record: RequestRecord, subject: str
    ) -> Reject | None:
        """An API key's own limits and budget, counted like a tenant's under its subject (a
        second round trip, only for a key that has them: none otherwise); a key refused gives
        its tenant's admission back."""
        keyed = route._replace(tenant=subject)
        ticket = await self.control.tenant_ticket(keyed, time.time())
        record.limit_headers = ticket.headers or record.limit_headers
        if ticket.reject is None:
            record.key_slot, record.key_reserved = ticket.slot, ticket.reserved
            return None
        now = time.time()
        self.control.finished(route, now)
        tenant = TenantTicket(None, record.reserved_slot, record.reserved_tokens)
        self.control.settle(route, tenant, None, now)
        return ticket.reject

    def finished(self, route: RouteRequest, record: RequestRecord) -> None:
        """The tenant's (and a limited key's) concurrency slot back, and the request settled
        on what it used."""
        now = time.time()
        line = usage_line(route, record)
        self.control.finished(route, now)
        ticket = TenantTicket(None, record.reserved_slot, record.reserved_tokens)
        alerted = partial(self._alert, route) if route.tenant in self._budgeted else None
        self.control.settle(route, ticket, line, now, alerted)
        if record.key_subject is not None:
            keyed = route._replace(tenant=record.key_subject)
            self.control.finished(keyed, now)
            key_ticket = TenantTicket(None, record.key_slot, record.key_reserved)
            self.control.settle(keyed, key_ticket, line, now)

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


def _budgeted(budgets: Mapping[str, TenantBudget | None] | None) -> frozenset[str]:
    return frozenset(name for name, budget in (budgets or {}).items() if budget is not None)


def usage_line(route: RouteRequest, record: RequestRecord) -> UsageLine | None:
    """What the request used (None when no upstream answered): see gateway/core/usage.py."""
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

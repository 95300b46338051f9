"""Admission before routing: tenant limits, saturation, shedding, the deadline queue, and
admission by the routing prediction (`decide`).

The decisions are pure (`policies/admission.py`); `AdmissionControl` holds what they need across
requests: each endpoint's previous saturation (for hysteresis), the deadline queue, and the
tenant counters, which live in the stats store so that a limit is exact across replicas (atomic
check-and-add; N concurrent requests against a limit of k admit k). It is synchronous with `now`
passed in and only awaits the store, so the offline simulator drives it in virtual time; the
decision pipeline (gateway/core/decision_pipeline.py) calls it in the decision order, and
`LiveAdmission` (gateway/server/admission_queue.py) drives both on the live request path: waiting
as a future, the dispatcher task, metrics and error responses.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, NamedTuple, Protocol, TypeVar

from gateway.config.settings import Api, Price, TenantBudget, TenantLimits
from gateway.core import accounting
from gateway.core.fair_charges import FairShare, fairness_key
from gateway.errors import Rejected
from gateway.state.background import Spawn
from gateway.state.store import (
    Alerted,
    StatsStore,
    TenantAdmission,
    TenantCharge,
    TenantQuota,
)
from gateway.state.usage import BudgetQuota, Settlement, UsageLine
from policies.admission import (
    ADMIT,
    AdmissionParams,
    Admit,
    BestEffort,
    Decision,
    Explore,
    Queue,
    Reason,
    Reject,
    Saturation,
    Verdict,
    admission_states,
    by_prediction,
    decide,
    has_headroom,
    idle,
    next_saturations,
    request_states,
    with_headroom,
)
from policies.base import EndpointSnapshot, Prediction, Ranking, RouteRequest, RoutingPolicy
from policies.deadline_queue import DeadlineQueue
from policies.estimate import Estimator
from policies.fair_share import ACTIVE_S
from policies.slo_aware import binding

TENANT_WINDOW_S = 60.0
BEST_EFFORT = "best_effort"  # the decision of a request no endpoint can serve within its SLO
DISPATCH_TICK_S = 0.02
# A request spared a refusal by load keeps sheddable ones of its model out this long.
SPARED_HOLD_S = 1.0
DISPATCH_PER_TICK = 4  # engine gauges lag: pace dispatches so one tick cannot flood an endpoint

Rank = Callable[[Sequence[EndpointSnapshot]], Ranking]  # the routing policy's, on candidates
TENANT_RETRY_AFTER_S = TENANT_WINDOW_S / 6  # a tenant window moves on in slots of this size
# A stream's tokens are charged to its tenant's window at most this often: the overshoot a
# window can see is what streams in flight write in this time beyond their reservations.
CHARGE_EVERY_S = 1.0
TENANT_REASONS = {
    "requests": Reason.TENANT_RATE_LIMITED,
    "tokens": Reason.TENANT_TOKEN_LIMITED,
    "concurrency": Reason.TENANT_CONCURRENCY_LIMITED,
    "budget": Reason.TENANT_BUDGET_EXCEEDED,
}
_MESSAGES = {
    Reason.TENANT_RATE_LIMITED: "Your tenant's request rate limit is reached; retry later.",
    Reason.TENANT_TOKEN_LIMITED: "Your tenant's token rate limit is reached; retry later.",
    Reason.TENANT_CONCURRENCY_LIMITED: "Too many concurrent requests for your tenant.",
    Reason.TENANT_BUDGET_EXCEEDED: "Your tenant's spend budget for this UTC day or month is "
    "used up; retry after Retry-After, when the window resets, or ask for a larger budget.",
    Reason.SATURATED: "Every endpoint for this model is saturated; retry later.",
    Reason.RESERVED_FOR_HIGHER_PRIORITY: "Remaining capacity is reserved for higher priority "
    "classes; retry later.",
    Reason.DEADLINE_UNREACHABLE: "The request cannot be served within its SLO deadline.",
    Reason.QUEUE_FULL: "The admission queue is full; retry later.",
    Reason.OVERLOADED: "No endpoint can serve this request within its SLO now; retry after "
    "Retry-After, when the queued work is predicted to have drained.",
    Reason.UNMEETABLE: "No endpoint can serve this request within its SLO, even idle (it is "
    "too large for its class's targets), and its class refuses such requests; retrying will "
    "not help: send it shorter or in a class with looser targets.",
}


def rejection(status: int, reason: Reason, retry_after_s: float) -> Rejected:
    return Rejected(_MESSAGES[reason], status=status, reason=reason, retry_after_s=retry_after_s)


class Waiting(Protocol):
    """A request in the deadline queue: what it is, and where it may go (its API, and the one
    endpoint it is pinned to, if any)."""

    @property
    def route(self) -> RouteRequest: ...

    @property
    def api(self) -> Api: ...

    @property
    def owner(self) -> str | None: ...


W = TypeVar("W", bound=Waiting)


class TenantTicket(NamedTuple):
    """A tenant admission: the refusal (None: admitted), the tokens of the reservation still
    held and the window slot they went to, the x-ratelimit-* headers, the tokens charged to
    the window as they were used (`charge_streamed`), and the cost held against the budget."""

    reject: Reject | None = None
    slot: int | None = None
    reserved: int = 0
    headers: accounting.Headers = ()
    charged: int = 0
    held_pusd: int = 0


ADMITTED = TenantTicket()
Pool = tuple[Sequence[EndpointSnapshot], dict[str, Saturation]]  # snapshots, saturation


class AdmissionControl(Generic[W]):
    """Admission across requests, for one replica; `W` is what waits in the queue."""

    def __init__(
        self,
        params: AdmissionParams,
        limits: Mapping[str, TenantLimits],
        store: StatsStore,
        spawn: Spawn,
        lease_ttl_s: float,
        budgets: Mapping[str, TenantBudget | None] | None = None,
        write: Spawn | None = None,
        batch: accounting.UsageBatch | None = None,
        fair: FairShare | None = None,
    ) -> None:
        """`write`: how settlements are sent (default `spawn`; the caller's own call when the
        store only queues them). `batch`: where usage with nothing exact to settle waits for
        `flush_usage` (None: every request settles at once). `fair`: the fairness counters
        (gateway/core/fair_charges.py), charged on admission, synced by the caller."""
        self.params = params
        self.limits = limits
        self.budgets = budgets or {}
        self.store = store
        self.spawn = spawn
        self.write = write or spawn
        self.lease_ttl_s = lease_ttl_s
        self.batch = batch
        self.states: dict[str, Saturation] = {}
        self.queue: DeadlineQueue[W] = DeadlineQueue(params.queue_max_size)
        self.queued: Counter[str] = Counter()  # waiting requests per model
        self.fair = fair or FairShare()
        self.deferred: set[str] = set()  # request ids waiting that a later one of theirs passed
        self._largest_pool_tokens: int | None = None  # the largest engine KV pool scraped
        # request ids of sheddable requests admitted and not finished, by model
        self._sheddable_in_flight: defaultdict[str, set[str]] = defaultdict(set)
        self._spared_at: dict[str, float] = {}  # model -> when a request was last spared
        self.displaced: list[W] = []  # waiters a less-served key took the place of (`admit`)

    def reconfigure(
        self,
        params: AdmissionParams,
        limits: Mapping[str, TenantLimits],
        budgets: Mapping[str, TenantBudget | None] | None = None,
    ) -> None:
        """New parameters for new decisions; the queue keeps its waiters. Batched usage is
        settled first: a tenant given a budget is checked against all it has spent."""
        self.flush_usage()
        self.params = params
        self.limits = limits
        self.budgets = budgets or {}
        self.queue.max_size = params.queue_max_size

    def saturation(self, snapshots: Sequence[EndpointSnapshot]) -> dict[str, Saturation]:
        self._note_pools(snapshots)
        states = next_saturations(self.states, snapshots, self.params)
        self.states.update(states)
        return states

    def _note_pools(self, snapshots: Sequence[EndpointSnapshot]) -> None:
        """The largest KV pool among the snapshots, when any reports one (else the last known):
        one loop, as this runs per request."""
        largest = 0
        for snapshot in snapshots:
            engine = snapshot.engine
            if engine is not None and (pool := engine.kv_capacity_tokens) and pool > largest:
                largest = pool
        if largest:
            self._largest_pool_tokens = largest

    def _admitted_states(
        self, route: RouteRequest, current: Sequence[EndpointSnapshot]
    ) -> dict[str, Saturation]:
        """`_states_for(route, current, saturation(current))` in one pass over the endpoints
        (`admission_states`): the hysteresis moves on, and each endpoint's state as this
        request would find it once admitted comes back."""
        self._note_pools(current)  # first: the footprint reads the largest pool
        states, found = admission_states(self.states, current, self.footprint(route), self.params)
        self.states.update(states)
        return found

    def footprint(self, route: RouteRequest) -> int:
        """KV tokens the request will hold at most: its prompt plus its output.

        A request larger than every KV pool can never be served (vLLM's max_model_len fits in
        its pool), so its endpoint refuses it with a 400 at once: it holds nothing, and must
        not wait in the queue for room that never comes.
        """
        tokens = route.prompt_tokens + self.expected_output(route)
        largest = self._largest_pool_tokens
        return 0 if largest is not None and tokens > largest else tokens

    def expected_output(self, route: RouteRequest) -> int:
        """The output tokens a request is expected to write: its max_tokens, else its class's
        default, else admission's."""
        default = route.slo.default_output_tokens or self.params.default_output_tokens
        return route.max_tokens or default

    def admit(
        self, route: RouteRequest, current: Sequence[EndpointSnapshot], now: float
    ) -> tuple[Decision, list[EndpointSnapshot]]:
        """The decision and, when admitted, the candidates this request may use now. A request
        refused because the queue is full takes the place of a more-served key's newest waiter
        of its class, if there is one (with fair share on): that waiter goes to `displaced`,
        for the caller to refuse as the queue refused it."""
        states = self._admitted_states(route, current)
        queued = self.queued.get(route.model, 0) + self._held(route.model, now)
        decision = decide(route.slo, states.values(), self.params, now_s=now, queued=queued)
        if (
            isinstance(decision, Reject)
            and decision.reason == Reason.QUEUE_FULL
            and queued <= self.params.queue_max_size  # one place frees enough
            and self._displace(route, now)
        ):
            decision = decide(route.slo, states.values(), self.params, now_s=now, queued=queued - 1)
        if not isinstance(decision, Admit):
            return decision, []
        self._charge(route)
        return decision, self._eligible(route, current, states)

    def decide(
        self,
        route: RouteRequest,
        current: Sequence[EndpointSnapshot],
        now: float,
        rank: Rank,
        estimator: Estimator | None,
    ) -> Reject | Queue | Ranking:
        """Admission by thresholds (`admit`), then by the routing prediction on `rank`'s
        ranking of the candidates they leave (of all of them when the request would queue):
        policies/admission.py, "By prediction". `estimator`: the policy's (`estimator_of`),
        for the request on idle endpoints. The ranking when the request goes now (its reason
        `best_effort` or `explore` when admission chose so); a refusal by load spares the
        least-served fairness key of the class (`_least_served`); a refused request's
        fairness charge goes back as any failed one's does."""
        decision, eligible = self.admit(route, current, now)
        if isinstance(decision, Reject):
            return decision
        ranking = rank(eligible if isinstance(decision, Admit) else current)
        verdict = _judged(route, ranking, estimator)
        if isinstance(verdict, Reject):
            if verdict.reason != Reason.OVERLOADED or not self._spared(route, now):
                return verdict
            verdict = ADMIT  # the load is others': theirs are refused first
        if isinstance(decision, Queue):
            if isinstance(verdict, BestEffort):  # it cannot meet its target: waits as long as any
                return Queue(now + self.params.queue_max_wait_s)
            return decision
        if isinstance(verdict, Explore):
            return _explored_first(route, ranking, verdict.index)
        return ranking._replace(reason=BEST_EFFORT) if isinstance(verdict, BestEffort) else ranking

    def take_displaced(self) -> list[W]:
        """The waiters displaced since the last call (see `admit`), for the caller to refuse
        with `queue_full`."""
        taken, self.displaced = self.displaced, []
        return taken

    def _displace(self, route: RouteRequest, now: float) -> bool:
        """Whether a waiter of the request's class and model, of a key served more than its
        own, left the queue to make room for it (into `displaced`)."""
        if not self.params.fair_share:
            return False
        model = route.model
        victim = self.queue.displace(
            route.slo.name,
            fairness_key(route),
            lambda slo_class, key: self.fair.level(slo_class, key, now),
            lambda waiter: waiter.route.model == model,
        )
        if victim is None:
            return False
        self.queued[model] -= 1
        self.displaced.append(victim)
        return True

    def _spared(self, route: RouteRequest, now: float) -> bool:
        """Whether a refusal by load spares this request, the load being others': it is not
        sheddable while sheddable requests of its model are in flight (they are then refused
        for SPARED_HOLD_S, as while a request waits in the queue), or its fairness key is the
        least served of its class (`_least_served`)."""
        if not route.slo.sheddable and self._sheddable_in_flight[route.model]:
            self._spared_at[route.model] = now
            return True
        return self._least_served(route, now)

    def _held(self, model: str, now: float) -> int:
        """1 within SPARED_HOLD_S of sparing a request of `model`, else 0."""
        return 1 if now - self._spared_at.get(model, -SPARED_HOLD_S) < SPARED_HOLD_S else 0

    def _least_served(self, route: RouteRequest, now: float) -> bool:
        """Whether the request's fairness key is served less than every other key active in
        its class (with fair share on): then the load it would be refused for is theirs."""
        counters = self.fair.shared.get(route.slo.name)
        if not self.params.fair_share or counters is None:
            return False
        key, since_s = fairness_key(route), now - ACTIVE_S
        others = [k for k, seen_s in counters.seen_s.items() if k != key and seen_s >= since_s]
        if not others:
            return False
        level = self.fair.level
        own = level(route.slo.name, key, now)
        return all(own < level(route.slo.name, other, now) for other in others)

    def _charge(self, route: RouteRequest) -> None:
        """The fairness counter of an admitted request's key, charged its estimate."""
        estimate = route.prompt_tokens + (route.max_tokens or self.params.default_output_tokens)
        self.fair.admitted(route, estimate)
        if route.slo.sheddable:
            self._sheddable_in_flight[route.model].add(route.request_id)

    def eligible(
        self, route: RouteRequest, current: Sequence[EndpointSnapshot]
    ) -> list[EndpointSnapshot]:
        """After waiting: the candidates with headroom for its class (all when none has)."""
        return self._eligible(route, current, self._admitted_states(route, current))

    def _eligible(
        self,
        route: RouteRequest,
        current: Sequence[EndpointSnapshot],
        states: Mapping[str, Saturation],
    ) -> list[EndpointSnapshot]:
        return with_headroom(current, states, route.slo, self.params) or list(current)

    def _states_for(
        self,
        route: RouteRequest,
        current: Sequence[EndpointSnapshot],
        states: Mapping[str, Saturation],
    ) -> dict[str, Saturation]:
        """Each endpoint's state as this request would find it once admitted."""
        return request_states(states, current, self.footprint(route), self.params)

    def enqueue(self, waiter: W, deadline_s: float) -> bool:
        """False (and not queued) when the queue is full."""
        route = waiter.route
        if not self.queue.push(waiter, deadline_s, group=route.slo.name, key=fairness_key(route)):
            return False
        self.queued[waiter.route.model] += 1
        return True

    def withdraw(self, waiter: W) -> None:
        """Forget a waiter whose client went away (a no-op once dispatched or expired)."""
        if self.queue.remove(waiter):
            self.queued[waiter.route.model] -= 1

    def dispatch(
        self, now: float, snapshots: Callable[[W], Sequence[EndpointSnapshot]]
    ) -> tuple[list[W], list[W]]:
        """One dispatcher tick: (the waiters that can no longer meet their deadline, the few
        with headroom now: by class earliest deadline first, within a class least-served
        fairness key first; each is charged, and noted in `deferred` when a later one of its
        class went before it). Snapshots and saturation are taken once per model per tick:
        dispatched requests take their leases after the tick, so nothing the tick does changes
        them, and a long queue costs no snapshot rebuild per waiter."""
        expired = self.queue.drop_expired(now)
        pools: dict[str, Pool] = {}

        def fits(waiter: W) -> bool:
            route = waiter.route
            pool = pools.get(route.model)
            if pool is None:
                current = snapshots(waiter)
                pool = pools[route.model] = (current, self.saturation(current))
            states = self._states_for(route, *pool)
            return any(has_headroom(s, route.slo, self.params) for s in states.values())

        def level(slo_class: str, key: str) -> float:
            return self.fair.level(slo_class, key, now)

        dispatched = []
        for _ in range(DISPATCH_PER_TICK):
            popped = self.queue.pop(now, fits, level if self.params.fair_share else None)
            if popped is None:
                break
            dispatched.append(popped.item)
            self._charge(popped.item.route)
            if popped.deferred:
                self.deferred.add(popped.item.route.request_id)
        for waiter in (*expired, *dispatched):
            self.queued[waiter.route.model] -= 1
        return expired, dispatched

    def waited_for_fairness(self, route: RouteRequest) -> bool:
        """Whether the request, dispatched, had waited while later ones of its class went
        first by fairness (asked once: the note is dropped)."""
        if route.request_id not in self.deferred:
            return False
        self.deferred.discard(route.request_id)
        return True

    async def admit_tenant(
        self, route: RouteRequest, now: float, prices: Sequence[Price] = ()
    ) -> Reject | None:
        """None when admitted (see `tenant_ticket`)."""
        return (await self.tenant_ticket(route, now, prices)).reject

    async def tenant_ticket(
        self, route: RouteRequest, now: float, prices: Sequence[Price] = ()
    ) -> TenantTicket:
        """Every limit and the budget of the tenant in one atomic call to the shared store
        (one round trip); none for a tenant with neither. `prices`: those of the endpoints
        that may serve the request; its predicted cost at the dearest is held against the
        budget until it settles."""
        limits, budget_config = self.limits.get(route.tenant), self.budgets.get(route.tenant)
        if budget_config is None and (
            limits is None
            or not (limits.requests_per_min or limits.tokens_per_min or limits.max_concurrent)
        ):
            return ADMITTED
        budget = accounting.budget_quota(budget_config)
        quota = _quota(limits)
        output = self.expected_output(route)
        # Capped at the limit: a request bigger than the whole window (max_tokens 1000 under a
        # limit of 200) is admitted into an empty window, and settles on what it really used.
        reserved = route.prompt_tokens + output
        if quota.tokens is not None:
            reserved = min(reserved, quota.tokens)
        hold = accounting.predicted_hold_pusd(prices, budget, route.prompt_tokens, output)
        charge = TenantCharge(
            route.tenant, route.request_id, reserved, quota, self.lease_ttl_s, now, budget, hold
        )
        admission = await self.store.admit_tenant(charge)
        headers = accounting.limit_headers(quota, admission, now)
        if admission.verdict == "admitted":
            if quota.tokens is None:
                return TenantTicket(None, None, 0, headers, held_pusd=hold)
            return TenantTicket(None, admission.slot, reserved, headers, held_pusd=hold)
        retry = _retry_after_s(quota, budget, admission, now)
        return TenantTicket(Reject(429, TENANT_REASONS[admission.verdict], retry), headers=headers)

    def charge_streamed(
        self, route: RouteRequest, ticket: TenantTicket, used: int, now: float
    ) -> TenantTicket:
        """A running stream has used `used` tokens so far (prompt estimate + streamed): the
        ones not charged yet go to the window's current slot and leave the reservation, in one
        background write; the ticket as it stands after. Callers batch (CHARGE_EVERY_S)."""
        gained = used - ticket.charged
        if ticket.slot is None or gained <= 0:
            return ticket
        refund = min(ticket.reserved, gained)
        settlement = Settlement(
            route.tenant, now, ticket.slot, refund, gained, TENANT_WINDOW_S, None
        )
        self.write(self.store.settle(settlement))
        return ticket._replace(reserved=ticket.reserved - refund, charged=used)

    def settle(
        self,
        route: RouteRequest,
        ticket: TenantTicket,
        line: UsageLine | None,
        now: float,
        alerted: Alerted | None = None,
    ) -> None:
        """The finished request's real usage, in one background write: what is left of the
        reservation given back to its slot, the tokens not charged yet to the current slot,
        the spend, the budget hold released, the usage buckets (gateway/core/accounting.py).
        Without a slot or a budget nothing is exact: the usage joins the batch, if there is
        one, and a request that used nothing settles nothing."""
        budget = self.budgets.get(route.tenant)
        if ticket.slot is None and budget is None:
            if line is None:
                return
            if self.batch is not None:
                self.batch.add(route.tenant, now, line)
                return
        used = line.prompt_tokens + line.completion_tokens if line is not None else 0
        counted = ticket.slot is not None
        settlement = Settlement(
            route.tenant,
            now,
            ticket.slot,
            ticket.reserved if counted else 0,
            used - ticket.charged if counted else 0,
            TENANT_WINDOW_S,
            line,
            accounting.budget_quota(budget),
            route.request_id if ticket.held_pusd else None,
            ticket.held_pusd,
        )
        self.write(self.store.settle(settlement, alerted))

    def flush_usage(self) -> None:
        """Settle the batched usage, one write per tenant, hour and group."""
        if self.batch is None:
            return
        for tenant, at_s, line in self.batch.drain():
            settlement = Settlement(tenant, at_s, None, 0, 0, TENANT_WINDOW_S, line)
            self.write(self.store.settle(settlement))

    def served(self, route: RouteRequest, prompt: int, cached: int, output: int) -> None:
        """The request ended having been served these tokens (all 0: it failed): its fairness
        charge corrected from the estimate."""
        self.fair.ended(route, prompt, cached, output)

    def finished(self, route: RouteRequest, now: float) -> None:
        """Give back the tenant's concurrency slot (a no-op for tenants without one)."""
        self._sheddable_in_flight[route.model].discard(route.request_id)
        limits = self.limits.get(route.tenant)
        if limits is not None and limits.max_concurrent:
            self.spawn(self.store.release_tenant(route.tenant, route.request_id, now=now))


def _judged(route: RouteRequest, ranking: Ranking, estimator: Estimator | None) -> Verdict:
    """`by_prediction` on the ranking; the idle predictions by `estimator` (none without one:
    then a miss counts as load)."""

    def unloaded() -> list[tuple[Prediction, Prediction]]:
        if estimator is None:
            return []
        predict = estimator.predict
        pairs = (idle(s) for s in ranking.endpoints)
        return [(predict(route, measured), predict(route, prior)) for measured, prior in pairs]

    return by_prediction(route.slo, route.stream, ranking, unloaded)


def _explored_first(route: RouteRequest, ranking: Ranking, index: int) -> Ranking:
    """The ranking with its endpoint at `index` moved first, explored (what it reports
    predicted is that endpoint's)."""
    order = [index, *(i for i in range(len(ranking.endpoints)) if i != index)]
    predictions = tuple(ranking.predictions[i] for i in order)
    moved = predictions[0]
    name, p95_s, target_s = binding(route.slo, moved, route.stream)
    return ranking._replace(
        endpoints=tuple(ranking.endpoints[i] for i in order),
        predictions=predictions,
        reason="explore",
        predicted_ttft_s=moved.ttft_mean_s,
        predicted_ttft_p95_s=moved.ttft_p95_s,
        binding=name,
        binding_p95_s=p95_s,
        binding_target_s=target_s,
    )


def estimator_of(policy: RoutingPolicy) -> Estimator | None:
    """The routing policy's own estimate, when it predicts (slo_aware's): the same model and
    memo that ranked the request."""
    estimator = getattr(policy, "estimator", None)
    return estimator if isinstance(estimator, Estimator) else None


def _quota(limits: TenantLimits | None) -> TenantQuota:
    if limits is None:
        return TenantQuota(window_s=TENANT_WINDOW_S)
    return TenantQuota(
        limits.requests_per_min, limits.tokens_per_min, limits.max_concurrent, TENANT_WINDOW_S
    )


def _retry_after_s(
    quota: TenantQuota, budget: BudgetQuota | None, admission: TenantAdmission, now: float
) -> float:
    """When the limit that refused gives capacity back (a slot of the window, or the budget's
    UTC day or month)."""
    if admission.verdict == "budget" and budget is not None:
        # no window spent: refused for what requests in flight hold, back when they settle
        return accounting.budget_retry_after_s(budget, admission, now) or TENANT_RETRY_AFTER_S
    oldest = {"requests": admission.requests_oldest, "tokens": admission.tokens_oldest}
    if admission.verdict in oldest:
        reset = accounting.reset_s(oldest[admission.verdict], quota.window_s, now)
        return reset if reset > 0 else TENANT_RETRY_AFTER_S
    return TENANT_RETRY_AFTER_S

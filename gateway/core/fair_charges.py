"""This replica's side of fair share inside a class (the counters: policies/fair_share.py).

A request is charged when admitted (at once or out of the queue), on an estimate of what it
will be served, its prompt plus its max output, divided by its tenant's weight; when it ends
the estimate is corrected to what it was served (uncached prompt plus output). Charges gather
here and go to the shared store in one call per class every second (`sync`, a background
task: no round trip on the request path), which answers with every replica's counters; the
queue's order reads those plus what this replica charged since (`level`).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping
from typing import NamedTuple

from gateway.config.settings import GatewayConfig
from gateway.state.store import StatsStore
from policies.base import RouteRequest
from policies.fair_share import FORGET_S, NO_COUNTERS, Counters, floor, level, served_tokens

log = logging.getLogger(__name__)


class _Charge(NamedTuple):
    slo_class: str
    key: str
    weighted: float  # the estimate charged, weighted


def fairness_key(route: RouteRequest) -> str:
    return route.fairness_key or route.tenant


def weights(config: GatewayConfig) -> dict[str, float]:
    """Each tenant's fairness weight."""
    return {name: tenant.fairness.weight for name, tenant in config.tenants.items()}


class FairShare:
    """Charges by class and key not yet in the store, and the store's counters as last read."""

    def __init__(self, weights: Mapping[str, float] | None = None) -> None:
        """`weights`: by tenant (1 where not named)."""
        self.weights = weights or {}
        self.shared: dict[str, Counters] = {}  # class -> counters, as the last sync read them
        self._pending: defaultdict[str, defaultdict[str, float]] = _charges()
        self._sending: defaultdict[str, defaultdict[str, float]] = _charges()  # in a sync now
        self._charged: dict[str, _Charge] = {}  # request id -> its estimate, until it ends
        self._floors: dict[str, float] = {}  # class -> floor, as of the last sync
        self._wanted: set[str] = set()  # classes ordering asked about: read at the next sync

    def admitted(self, route: RouteRequest, estimate_tokens: int) -> None:
        """Charge an admitted request its estimate (corrected by `ended`)."""
        weighted = estimate_tokens / self.weights.get(route.tenant, 1.0)
        charge = _Charge(route.slo.name, fairness_key(route), weighted)
        self._charged[route.request_id] = charge
        self._pending[charge.slo_class][charge.key] += weighted

    def ended(self, route: RouteRequest, prompt: int, cached: int, output: int) -> None:
        """Correct an admitted request's charge to what it was served (nothing: it failed);
        a request never admitted was never charged."""
        charge = self._charged.pop(route.request_id, None)
        if charge is None:
            return
        served = served_tokens(prompt, cached, output) / self.weights.get(route.tenant, 1.0)
        self._pending[charge.slo_class][charge.key] += served - charge.weighted

    def level(self, slo_class: str, key: str, now_s: float) -> float:
        """The key's counter as the queue orders by it: `policies.fair_share.level` over the
        counters of the last sync, plus this replica's charges since."""
        counters = self.shared.get(slo_class)
        if counters is None:  # a class this replica never charged: other replicas may have
            self._wanted.add(slo_class)
            counters = NO_COUNTERS
        base = level(counters, key, now_s, self._floors.get(slo_class, 0.0))
        since = _amount(self._pending, slo_class, key) + _amount(self._sending, slo_class, key)
        return base + since

    async def sync(self, store: StatsStore, now: float) -> None:
        """Send the charges gathered, one call per class, and keep the counters read back.
        Charges whose call failed stay to be sent with the next."""
        for slo_class, gathered in self._pending.items():
            for key, amount in gathered.items():
                self._sending[slo_class][key] += amount
        self._pending = _charges()
        for slo_class in set(self._sending) | set(self.shared) | self._wanted:
            charges = dict(self._sending.get(slo_class, {}))
            counters = await store.charge_fair_share(slo_class, charges, now=now)
            self.shared[slo_class] = counters
            self._floors[slo_class] = floor(counters, now)
            self._sending.pop(slo_class, None)


def _amount(charges: Mapping[str, Mapping[str, float]], slo_class: str, key: str) -> float:
    found = charges.get(slo_class)
    return found.get(key, 0.0) if found is not None else 0.0


def _charges() -> defaultdict[str, defaultdict[str, float]]:
    return defaultdict(lambda: defaultdict(float))


class SubIds:
    """The sub-tenant ids each tenant's clients named on this replica lately, at most a cap
    per tenant: each id is a counter in the shared store and a metric series until forgotten,
    and the client chooses it, so without a cap one client could make any number of them."""

    def __init__(self) -> None:
        self._seen: dict[str, dict[str, float]] = {}  # tenant -> id -> last named (s)
        self._warned: set[str] = set()  # tenants past their cap, logged once

    def key(self, tenant: str, named: str, cap: int, now_s: float) -> str:
        """The fairness key: `<tenant>/<named>`, or the tenant itself when `cap` other ids of
        the tenant were named within FORGET_S (the fairness counters forget keys as old)."""
        seen = self._seen.setdefault(tenant, {})
        if named not in seen and len(seen) >= cap:
            for old in [i for i, at_s in seen.items() if at_s < now_s - FORGET_S]:
                del seen[old]
            if len(seen) >= cap:
                if tenant not in self._warned:
                    self._warned.add(tenant)
                    log.warning(
                        "tenant %r named more than max_sub_ids (%d) fairness sub-ids at once: "
                        "new ones count as the tenant",
                        tenant,
                        cap,
                    )
                return tenant
        seen[named] = now_s
        return f"{tenant}/{named}"

"""Discovered members joining and leaving a running gateway (gateway/watch/discovery.py).

A new member enters the registry, the shared view, the scraper and the health checks at once,
cold: it has no statistics, so the policy's exploration and priors apply as to any endpoint
not yet measured. A member that left DNS is withdrawn: no new request is routed to it, the
requests already on it finish (they hold its config), and once none of this replica's is left
and a grace period has passed (a request may be between choosing and opening), it is
forgotten. Every change is logged and counted (slo_gateway_discovery_changes_total, and the
members per group in slo_gateway_discovered_members); the dashboard lists the members the
registry has.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

from gateway.config.settings import EndpointConfig, EndpointGroupConfig
from gateway.server.runtime import Runtime
from gateway.telemetry.metrics import Counter, Gauge, log
from gateway.watch.discovery import GroupWatch

RETIRE_GRACE_S = 10.0
RETIRE_CHECK_S = 1.0


class Membership:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.watches = [GroupWatch(group, self.changed) for group in runtime.config.endpoint_groups]
        self._scrapes: dict[str, asyncio.Task[None]] = {}
        self._leaving: dict[str, float] = {}  # member id -> when it was withdrawn
        registry = runtime.metrics.registry
        self.members = Gauge(
            "slo_gateway_discovered_members",
            "Members of each endpoint group found in DNS now.",
            ["group"],
            registry=registry,
        )
        self.changes = Counter(
            "slo_gateway_discovery_changes",
            "Members that joined (added) or left (removed) an endpoint group.",
            ["group", "change"],
            registry=registry,
        )

    async def changed(
        self, group: EndpointGroupConfig, added: list[EndpointConfig], removed: list[str]
    ) -> None:
        for endpoint in added:
            self._join(endpoint)
        for endpoint_id in removed:
            self._withdraw(endpoint_id)
        watch = next(w for w in self.watches if w.group is group)
        self.members.labels(group.name).set(len(watch.members))
        self.changes.labels(group.name, "added").inc(len(added))
        self.changes.labels(group.name, "removed").inc(len(removed))
        log.warning(
            "discovery: group %s now %d members (added %s, removed %s)",
            group.name,
            len(watch.members),
            [e.id for e in added] or "none",
            removed or "none",
        )

    def _join(self, endpoint: EndpointConfig) -> None:
        runtime = self.runtime
        self._leaving.pop(endpoint.id, None)  # back before it was forgotten
        runtime.registry.add(endpoint)
        if endpoint.id not in runtime.view.endpoint_ids:
            runtime.view.endpoint_ids.append(endpoint.id)
        if all(e.id != endpoint.id for e in runtime.health.endpoints):
            runtime.health.endpoints.append(endpoint)
        poll = runtime.scraper.add(endpoint)
        if poll is not None and endpoint.id not in self._scrapes:
            self._scrapes[endpoint.id] = asyncio.create_task(poll)
        elif poll is not None:
            poll.close()  # already polled

    def _withdraw(self, endpoint_id: str) -> None:
        self.runtime.registry.withdraw(endpoint_id)
        self._leaving[endpoint_id] = time.monotonic()

    def retire_finished(self) -> None:
        """Forget the withdrawn members this replica has nothing left in flight on."""
        runtime, now = self.runtime, time.monotonic()
        for endpoint_id, since in list(self._leaving.items()):
            if now - since < RETIRE_GRACE_S or runtime.view.local[endpoint_id] > 0:
                continue
            del self._leaving[endpoint_id]
            runtime.registry.forget(endpoint_id)
            runtime.view.endpoint_ids.remove(endpoint_id)
            runtime.health.endpoints[:] = [
                e for e in runtime.health.endpoints if e.id != endpoint_id
            ]
            runtime.scraper.remove(endpoint_id)
            task = self._scrapes.pop(endpoint_id, None)
            if task is not None:
                task.cancel()
            log.info("discovery: %s forgotten (nothing left in flight)", endpoint_id)

    def jobs(self) -> list[Coroutine[Any, Any, None]]:
        """The background work: one loop per group, and the retirement of leavers (none for a
        config of static endpoints only)."""
        if not self.watches:
            return []
        return [watch.run() for watch in self.watches] + [self._retire_loop()]

    async def _retire_loop(self) -> None:
        try:
            while True:
                await asyncio.sleep(RETIRE_CHECK_S)
                self.retire_finished()
        finally:
            for task in self._scrapes.values():
                task.cancel()

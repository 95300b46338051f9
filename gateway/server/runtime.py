"""Everything one app instance owns while it runs, built and torn down by the app lifespan."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from functools import partial
from random import Random
from typing import Any

from gateway.config.api_records import ApiRecords, parse_records
from gateway.config.settings import GatewayConfig, Settings, TenantBudget, TenantLimits
from gateway.core.decision_pipeline import DecisionPipeline
from gateway.core.fair_charges import SubIds, weights
from gateway.server.admission_queue import LiveAdmission, Waiter, admission_control
from gateway.server.answer import Responder
from gateway.server.auth import KeyRing, warn_unset_keys
from gateway.server.decision_log import DecisionLog
from gateway.server.finisher import Finisher
from gateway.server.forwarding import Forwarder
from gateway.server.response_owners import ResponseOwners
from gateway.server.router import Router
from gateway.state import keys
from gateway.state.background import Background
from gateway.state.breaker import BreakerPolicy
from gateway.state.control import ControlRecords, ControlStore, control_store_for, follow_records
from gateway.state.leases import LeaseBook
from gateway.state.memory_store import MemoryStatsStore
from gateway.state.redis_connect import connect
from gateway.state.redis_store import RedisStatsStore
from gateway.state.resilient import ResilientStore
from gateway.state.store import StatsStore
from gateway.state.view import SharedView
from gateway.telemetry.metrics import Metrics, log
from gateway.upstream.client import AiohttpUpstream
from gateway.upstream.redaction import redactor_for
from gateway.watch.context_windows import ContextWindows
from gateway.watch.endpoints import Registry
from gateway.watch.health import HealthChecker
from gateway.watch.scraper import Scraper
from policies.registry import build as build_policy


def open_store(config: GatewayConfig, settings: Settings) -> tuple[StatsStore, str]:
    """Redis (degrading to memory while it is down) when a URL is set, else memory."""
    state = config.state
    retention_s = state.usage_retention_days * 86400.0
    memory = MemoryStatsStore(
        window_s=state.window_s, bucket_s=state.bucket_s, usage_retention_s=retention_s
    )
    if not settings.redis_url:
        return memory, "memory"
    connection = connect(settings.redis_url, timeout_s=state.redis_timeout_s)
    redis = RedisStatsStore(
        connection.client,
        window_s=state.window_s,
        bucket_s=state.bucket_s,
        prefix=settings.redis_prefix or keys.PREFIX,
        owns_client=True,
        usage_retention_s=retention_s,
    )
    resilient = ResilientStore(redis, memory, connection.ping, timeout_s=state.redis_timeout_s)
    return resilient, "redis"


def _watchers(
    config: GatewayConfig, store: StatsStore, upstream: AiohttpUpstream
) -> tuple[Scraper, HealthChecker]:
    """Engine scraping and health probes, sharing the upstream connection pool."""
    state = config.state
    scraper = Scraper(
        config.endpoints,
        upstream.client,
        interval_s=state.scrape_interval_s,
        stale_after_s=state.scrape_stale_after_s,
        rate_window_s=state.rate_window_s,
    )
    breaker = BreakerPolicy(state.breaker_failures, state.breaker_cooldown_s)
    health = HealthChecker(
        config.endpoints, store, upstream.client, policy=breaker, interval_s=state.health_interval_s
    )
    return scraper, health


@dataclass
class Runtime:
    config: GatewayConfig
    registry: Registry
    keyring: KeyRing
    store: StatsStore
    store_kind: str
    view: SharedView
    scraper: Scraper
    health: HealthChecker
    admission: LiveAdmission
    upstream: AiohttpUpstream
    router: Router
    metrics: Metrics
    background: Background
    control: ControlStore
    windows: ContextWindows
    pipeline: DecisionPipeline[Waiter]  # the routing policy is its, swapped on a config reload
    leases: LeaseBook
    owners: ResponseOwners  # which endpoint stored each response
    responder: Responder  # its redactor swapped on a config reload
    forwarder: Forwarder
    decisions: DecisionLog  # the recent decisions, for /admin/decisions and the dashboard
    api: ApiRecords = field(default_factory=ApiRecords)
    sub_ids: SubIds = field(default_factory=SubIds)  # fairness sub-tenants named lately
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    @classmethod
    def build(
        cls,
        config: GatewayConfig,
        settings: Settings,
        store: StatsStore | None = None,
        metrics: Metrics | None = None,
    ) -> Runtime:
        """`metrics`: the app's, whose middleware counts requests into them (server/app.py)."""
        warn_unset_keys(config)
        store, kind = (store, "custom") if store else open_store(config, settings)
        metrics, background = metrics or Metrics(), Background()
        registry = Registry(config.endpoints)
        upstream = AiohttpUpstream(config.server)
        view = SharedView(store, [e.id for e in config.endpoints], config.state.refresh_s)
        scraper, health = _watchers(config, store, upstream)
        leases = LeaseBook(store, view, metrics, background, config.server.lease_ttl_s)
        finisher = Finisher(leases, registry, health, view, metrics, background)
        limits = {name: tenant.limits for name, tenant in config.tenants.items()}
        budgets = {name: tenant.budget for name, tenant in config.tenants.items()}
        control = admission_control(
            config.admission,
            limits,
            store,
            background,
            config.server.lease_ttl_s,
            budgets,
            weights(config),
        )
        policy = build_policy(config.policy)
        pipeline = DecisionPipeline(registry, view, scraper.signals, control, policy, Random())
        admission = LiveAdmission(pipeline, metrics, registry, budgets)
        owners = ResponseOwners.over(store, config.state.stored_responses_per_tenant)
        responder = Responder(
            config.server, pipeline, admission, finisher, owners, redactor_for(config)
        )
        forwarder = Forwarder(config.server, registry, upstream, finisher, admission.footprint)
        decisions = DecisionLog()
        router = Router(pipeline, admission, forwarder, responder, decisions, metrics)
        return cls(
            config,
            registry,
            KeyRing(config),
            store,
            kind,
            view,
            scraper,
            health,
            admission,
            upstream,
            router,
            metrics,
            background,
            control_store_for(store),
            ContextWindows(registry, upstream.client, config.state.health_interval_s),
            pipeline,
            leases,
            owners,
            responder,
            forwarder,
            decisions,
        )

    def start(self) -> None:
        """Start every background task, each restarted if it fails (`kept_running`); `close`
        stops them."""
        jobs: list[Job] = [
            self.view.run,
            self.scraper.run,
            self.health.run,
            self.windows.run,
            self.admission.run,
            self.admission.settle_batches,
            self.admission.sync_fair_share,
            self.leases.run,
            self.metrics.usage.run,
            partial(follow_records, self.control, self.apply_records),
        ]
        if isinstance(self.store, ResilientStore):
            jobs.append(self.store.watch)
        self.tasks = [asyncio.create_task(kept_running(job)) for job in jobs]

    def apply(self, config: GatewayConfig) -> None:
        """Swap in the reloadable sections of a new config (see gateway/server/reload.py)."""
        fixed = ("endpoints", "endpoint_groups", "server", "state")
        if any(getattr(config, name) != getattr(self.config, name) for name in fixed):
            log.warning("config reload: endpoints, groups, server, state apply after a restart")
        warn_unset_keys(config)
        self.pipeline.policy = build_policy(config.policy)
        self.config = self.config.model_copy(
            update={
                name: getattr(config, name)
                for name in ("tenants", "classes", "policy", "admission")
            }
        )
        self._grant()
        # The running endpoints' keys and the new tenants' (the endpoints change on restart).
        self.responder.redactor = redactor_for(self.config)

    def apply_records(self, records: ControlRecords) -> None:
        """Swap in the admin API's tenants and keys (from `follow_records`, or after a change)."""
        self.api = parse_records(records.version, records.keys, records.tenants)
        self._grant()

    def _grant(self) -> None:
        """The keyring and the limits of every tenant and limited key, from the config and
        the admin API's records."""
        self.keyring = KeyRing(self.config, self.api.tenants, list(self.api.keys.values()))
        limits: dict[str, TenantLimits] = {}
        budgets: dict[str, TenantBudget | None] = {}
        fair_weights: dict[str, float] = {}
        for name, tenant in self.keyring.tenants.items():
            limits[name], budgets[name] = tenant.limits, tenant.budget
            fair_weights[name] = tenant.fairness.weight
        for key in self.api.keys.values():
            if key.limited:
                limits[key.subject], budgets[key.subject] = key.limits, key.budget
        self.admission.reconfigure(self.config.admission, limits, budgets, fair_weights)

    def next_seq(self) -> int:
        return next(self._seq)

    @property
    def shared_state_up(self) -> bool:
        return not isinstance(self.store, ResilientStore) or self.store.up

    async def close(self) -> None:
        """Within `SHUTDOWN_S` whatever a job, a write or a peer does, once streams are drained:
        a workers supervisor waits `KILL_GRACE_S` past the drain and a test server 10 s, and
        these steps' budgets once added up to 20 s."""
        await stop_tasks(self.tasks)
        await self.background.drain(timeout_s=DRAIN_S)
        await asyncio.gather(
            closed("upstream connections", self.upstream.aclose()),
            closed("state store", self.store.close()),
        )


# Shutdown's budgets: stopping the jobs, draining their writes, closing connections (together).
STOP_ROUNDS = 4
STOP_ROUND_S = 0.5
DRAIN_S = 1.0
CLOSE_TIMEOUT_S = 1.5  # the store's last write batch is bounded by redis_timeout_s (0.25 s)
SHUTDOWN_S = STOP_ROUNDS * STOP_ROUND_S + DRAIN_S + CLOSE_TIMEOUT_S  # 4.5 s at most


async def closed(
    what: str, closing: Coroutine[Any, Any, None], timeout_s: float = CLOSE_TIMEOUT_S
) -> None:
    """Await a close for at most `timeout_s`, then log and go on: a connection stuck on a dead
    peer must not keep the process from exiting. The close is then cancelled but not waited
    for: `asyncio.wait_for` waits for a cancelled close to end, forever if the close ignores
    its cancellation (a client library's cleanup that catches it)."""
    task = asyncio.ensure_future(closing)
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if task in done:
        task.result()  # its failure, if any, is the caller's
        return
    task.cancel()
    log.error("shutdown: closing the %s took over %.0f s; left unfinished", what, timeout_s)


Job = Callable[[], Coroutine[Any, Any, None]]
RESTART_AFTER_S = 1.0


async def kept_running(job: Job) -> None:
    """Run a background job, and again after RESTART_AFTER_S when it fails: each job catches
    the failures it expects (a store that does not answer), and anything else would end its
    task for good without a word, leaving the gateway on a view, scrape or queue that no longer
    moves (a reply misread by the shared view's refresh once did)."""
    while True:
        try:
            await job()
            return
        except Exception:
            log.exception("background job %s failed; restarting it", _name_of(job))
            await asyncio.sleep(RESTART_AFTER_S)


def _name_of(job: Job) -> str:
    found = getattr(job, "func", job)  # a partial's function
    return str(getattr(found, "__qualname__", found))


async def stop_tasks(
    tasks: list[asyncio.Task[None]], rounds: int = STOP_ROUNDS, round_s: float = STOP_ROUND_S
) -> None:
    """Cancel the tasks and wait for them, cancelling again those still running after each
    `round_s`: a job cancelled inside a Redis call can outlive its first cancellation (seen
    under load: the shared view's refresh and the health checks, each still running a second
    later), and one that loops on would hold shutdown. A task still running after `rounds` is
    logged by name and left behind, so shutdown goes on."""
    pending = {task for task in tasks if not task.done()}
    for _ in range(rounds):
        if not pending:
            break
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=round_s)
    for task in tasks:  # a job's failure retrieved, as gather(return_exceptions=True) did
        if task.done() and not task.cancelled():
            task.exception()
    for task in pending:
        log.error("shutdown: background task %s ignored cancellation; left running", task)

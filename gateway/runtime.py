"""Everything one app instance owns while it runs, built and torn down by the app lifespan."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from gateway.auth import KeyRing
from gateway.background import Background
from gateway.proxy import Upstream
from gateway.registry import Registry
from gateway.router import Router
from gateway.settings import GatewayConfig
from gateway.stats.base import StatsStore
from gateway.telemetry import Metrics


@dataclass
class Runtime:
    config: GatewayConfig
    registry: Registry
    keyring: KeyRing
    store: StatsStore
    store_kind: str
    upstream: Upstream
    router: Router
    metrics: Metrics
    background: Background
    _seq: itertools.count[int] = field(default_factory=itertools.count)

    @classmethod
    def build(
        cls, config: GatewayConfig, store: StatsStore, store_kind: str, metrics: Metrics
    ) -> Runtime:
        registry = Registry(config.endpoints)
        background = Background()
        upstream = Upstream(config.server)
        router = Router(config, registry, store, upstream, metrics, background)
        return cls(
            config=config,
            registry=registry,
            keyring=KeyRing(config),
            store=store,
            store_kind=store_kind,
            upstream=upstream,
            router=router,
            metrics=metrics,
            background=background,
        )

    def next_seq(self) -> int:
        return next(self._seq)

    async def close(self) -> None:
        await self.background.drain()
        await self.upstream.aclose()
        await self.store.close()

"""Each engine's context window, learnt from vLLM's `GET /v1/models` (`max_model_len` on each
model entry) into the registry, where the router reads it (gateway/core/context_window.py).

Every `kind: vllm` endpoint without a configured `max_model_len` is asked at start-up, then
every `interval_s` while its window is unknown (not up yet, or an engine that does not say)
and every REFRESH_S once known (a restarted engine may have another). An endpoint serving
several models gets the smallest of their windows. The app lifespan runs `run()`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from gateway.config.settings import EndpointConfig
from gateway.telemetry.metrics import log
from gateway.watch.endpoints import Registry

REFRESH_S = 60.0


def window_of(endpoint: EndpointConfig, listing: Any) -> int | None:
    """The smallest `max_model_len` of the endpoint's models in a /v1/models answer."""
    entries = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(entries, list):
        return None
    upstream = set(endpoint.models.values())
    found = [
        entry["max_model_len"]
        for entry in entries
        if isinstance(entry, dict)
        and entry.get("id") in upstream
        and isinstance(entry.get("max_model_len"), int)
        and entry["max_model_len"] > 0
    ]
    return min(found) if found else None


class ContextWindows:
    def __init__(
        self,
        registry: Registry,
        client: httpx.AsyncClient,
        interval_s: float = 5.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.registry = registry
        self.interval_s = interval_s
        self._client = client
        self._sleep = sleep

    async def learn_once(self) -> bool:
        """Ask every engine without a configured window; whether all of them answered."""
        asked = [
            e
            for e in self.registry.endpoints.values()
            if e.kind == "vllm" and e.max_model_len is None
        ]
        learnt = await asyncio.gather(*(self._learn(e) for e in asked))
        return all(learnt)

    async def run(self) -> None:
        while True:
            known = await self.learn_once()
            await self._sleep(REFRESH_S if known else self.interval_s)

    async def _learn(self, endpoint: EndpointConfig) -> bool:
        url = f"{endpoint.base_url.rstrip('/')}/models"
        try:
            response = await self._client.get(url, headers=endpoint.auth_headers(), timeout=2.0)
            window = window_of(endpoint, response.json()) if response.is_success else None
        except (httpx.HTTPError, ValueError) as exc:
            log.debug("context window of %s: %s", endpoint.id, type(exc).__name__)
            return False
        if window is not None:
            self.registry.learn_window(endpoint.id, window)
        return window is not None

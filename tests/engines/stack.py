"""The gateway in front of a real vLLM: its config, and its view of the engine."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from tests.engines.vllm_server import SERVED_NAME, VllmServer
from tests.fixtures.gateway import (
    PUBLIC_MODEL,
    admin_endpoints,
    config,
    endpoint,
    eventually,
    running_gateway,
)
from tests.fixtures.servers import UvicornThread

ENDPOINT_ID = "vllm-cpu"
KV_CACHE_TOKENS = 8192  # the session's server: a handful of 1,500-token requests fills it


@contextlib.contextmanager
def gateway_over(server: VllmServer, **sections: Any) -> Iterator[UvicornThread]:
    """A gateway in front of `server`, returned once it has scraped the engine's metrics."""
    real = endpoint(ENDPOINT_ID, server.base_url, models={PUBLIC_MODEL: SERVED_NAME})
    with running_gateway(config([real], **sections)) as gateway:
        assert eventually(lambda: _scraped(gateway.base_url), 10), "no scrape of vLLM's /metrics"
        yield gateway


def engine_view(gateway_url: str) -> dict[str, Any]:
    """The engine signals GET /admin/endpoints shows for the vLLM endpoint ({} before a scrape)."""
    view: dict[str, Any] | None = admin_endpoints(gateway_url)[ENDPOINT_ID]["engine"]
    return view or {}


def _scraped(gateway_url: str) -> bool:
    return engine_view(gateway_url).get("running") is not None

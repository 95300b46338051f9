"""A tenant's `enforce_class_priority` on every generating API: the class's engine priority and
service tier reach the simulated engine in place of the client's own, on chat, completions,
Responses and Messages alike (the engine records the fields it received)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.fixtures.gateway import (
    PUBLIC_MODEL,
    TENANT_KEY,
    engine,
    fleet_gateway,
    member,
    sim_stats,
    tenants_with,
)

pytestmark = pytest.mark.integration
CLIENT_HINTS = {"priority": -1000, "service_tier": "priority"}
BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
    "/v1/completions": {"prompt": "Hi", "max_tokens": 2},
    "/v1/responses": {"input": "Hi", "max_output_tokens": 2},
    "/v1/messages": {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2},
}


@pytest.fixture(scope="module")
def urls() -> Iterator[tuple[str, str]]:
    classes = {
        "interactive": {"ttft_ms": 1000, "tpot_ms": 100, "engine_priority": 5,
                        "service_tier": "flex"},
        "batch": {"deadline_ms": 60000, "sheddable": True},
    }  # fmt: skip
    takes_both = member(engine(), priority_scheduling=True, service_tiers=True)
    with fleet_gateway(
        {"e": takes_both},
        tenants=tenants_with(acme={"enforce_class_priority": True}),
        classes=classes,
    ) as (gateway, members):
        yield gateway.base_url, members["e"]


@pytest.mark.parametrize("path", list(BODIES))
def test_the_class_hints_replace_the_clients_on_every_api(urls: tuple[str, str], path: str) -> None:
    gateway_url, engine_url = urls
    body = {"model": PUBLIC_MODEL} | BODIES[path] | CLIENT_HINTS
    answer = httpx.post(
        gateway_url + path, json=body, headers={"authorization": f"Bearer {TENANT_KEY}"}
    )
    assert answer.status_code == 200, answer.text
    assert sim_stats(engine_url)["last_hints"] == {"priority": 5, "service_tier": "flex"}

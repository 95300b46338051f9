"""Provider API keys, tenant keys and the admin key never leave the gateway: not in its logs
(stdout and stderr, at debug level), error bodies, streamed error events (whole, split across
reads, or cut mid-line), response headers, /metrics, the admin views or any other page it
serves, while requests flow and fail, even when an upstream echoes them (`echo_secrets`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from gateway.config.settings import ConfigError, parse_config
from tests.faults.upstreams import ECHO_MODES, ScriptedUpstream, echo_secrets, serving
from tests.fixtures.gateway import (
    ADMIN_KEY,
    PROVIDER_KEY,
    PUBLIC_MODEL,
    TENANT_KEY,
    chat_body,
    config,
    endpoint,
    fleet_member,
    provider,
)
from tests.fixtures.processes import LoggedGateway
from tests.fixtures.servers import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]
BROKEN_MODEL = "only-broken"
SECRETS = [PROVIDER_KEY, PROVIDER_KEY.removeprefix("sk-test-"), TENANT_KEY, ADMIN_KEY]
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
PAGES = [
    "/metrics", "/readyz", "/healthz", "/openapi.json", "/admin/endpoints", "/admin/decisions",
    "/admin/dashboard.json", "/dashboard",
]  # fmt: skip


def endpoints(good: str, wrong_key: str, erroring: str, echo: str) -> list[dict[str, Any]]:
    dead = f"http://127.0.0.1:{free_port()}"
    broken = {BROKEN_MODEL: "m"}
    return [
        endpoint("good", good, kind="openai"),
        endpoint("wrong-key", wrong_key, kind="openai"),  # answers 401 to our key
        endpoint("erroring", erroring, kind="openai"),  # answers 500
        endpoint("echo", echo, kind="openai", models={"echo-model": "m"}),
        endpoint("dead", dead, kind="openai", models=broken),
        endpoint("dead-too", wrong_key, kind="openai", models=broken),
    ]


def traffic(base_url: str) -> list[httpx.Response]:
    url = base_url + "/v1/chat/completions"
    auth = {"authorization": f"Bearer {TENANT_KEY}"}
    bodies = [
        *[chat_body(max_tokens=3, stream=stream) for stream in (False, True) * 4],
        chat_body(model=BROKEN_MODEL, max_tokens=3),
        chat_body(model=BROKEN_MODEL, max_tokens=3, stream=True),
        *[
            chat_body(f"{mode} {TENANT_KEY} {ADMIN_KEY}", model="echo-model", stream=stream)
            for mode in ECHO_MODES
            for stream in (False, True)
        ],
        chat_body(model="nope"),
        {"model": PUBLIC_MODEL},
    ]
    responses = [httpx.post(url, json=body, headers=auth, timeout=20) for body in bodies]
    responses.append(httpx.post(url, json=bodies[0], headers={"authorization": "Bearer wrong"}))
    responses.append(httpx.get(base_url + "/admin/endpoints", headers=auth))
    return responses


def test_provider_keys_never_appear_in_logs_bodies_headers_metrics_or_admin_views(
    tmp_path: Path,
) -> None:
    wrong = provider().model_copy(update={"api_key": "sk-test-some-other-key"})
    erroring = provider(faults={"error_rate": 1.0})
    with (
        fleet_member(provider()) as good,
        fleet_member(wrong) as wrong_key,
        fleet_member(erroring) as failing,
        serving(ScriptedUpstream(echo_secrets)) as echo,
    ):
        data = config(endpoints(good, wrong_key, failing, echo), state={"health_interval_s": 0.2})
        gateway = LoggedGateway(data, tmp_path, GATEWAY_LOG_LEVEL="debug")
        with gateway:
            responses = traffic(gateway.base_url)
            pages = [httpx.get(gateway.base_url + page, headers=ADMIN) for page in PAGES]
            tenant = {"authorization": f"Bearer {TENANT_KEY}"}
            pages.append(httpx.get(gateway.base_url + "/v1/models", headers=tenant))
            logs = gateway.stop()
    statuses = sorted({r.status_code for r in responses})
    assert {200, 400, 401, 404} <= set(statuses) and statuses[-1] >= 502, statuses  # and failures
    assert all(page.status_code == 200 for page in pages), [p.url for p in pages if p.is_error]
    exposed = {
        "logs": logs,
        **{f"response {i}": _dump(r) for i, r in enumerate(responses)},
        **{str(page.url.path): _dump(page) for page in pages},
    }
    leaks = [(where, s) for where, text in exposed.items() for s in SECRETS if s in text]
    assert leaks == []
    assert "circuit breaker of dead" in logs  # the failures were logged, without secrets


def test_an_endpoint_url_with_credentials_is_refused_at_startup() -> None:
    data = config([endpoint("e", "http://user:url-password-9c1d@127.0.0.1:9", kind="openai")])
    with pytest.raises(ConfigError, match="credentials") as refused:
        parse_config(data, "test")
    assert "url-password-9c1d" not in str(refused.value)


def _dump(response: httpx.Response) -> str:
    headers = "\n".join(f"{k}: {v}" for k, v in response.headers.multi_items())
    return f"{response.status_code}\n{headers}\n\n{response.text}"

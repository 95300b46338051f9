"""Tenant limits exact across two gateway processes; hot reload under load drops nothing."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.faults.clients import Load
from tests.fixtures.gateway import (
    OTHER_TENANT_KEY,
    TENANT_KEY,
    chat_body,
    eventually,
    one_engine_config,
)
from tests.fixtures.processes import GatewayProcess, two_replicas

pytestmark = pytest.mark.integration


def limited(data: dict[str, Any], tenant: str, **limits: int) -> dict[str, Any]:
    data["tenants"][tenant]["limits"] = limits
    return data


class HeldStream:
    """A stream opened in a thread and held open until released; records its status."""

    def __init__(self, url: str, key: str) -> None:
        self.status: int | None = None
        self.reason = ""
        self.release = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(url, key), daemon=True)
        self._thread.start()

    def _run(self, url: str, key: str) -> None:
        body = chat_body(max_tokens=2000, stream=True)
        headers = {"authorization": f"Bearer {key}"}
        with httpx.stream("POST", url, json=body, headers=headers, timeout=60) as response:
            chunks = response.iter_bytes()
            next(chunks, b"")
            self.reason = response.headers.get("x-slo-gateway-reason", "")
            self.status = response.status_code
            self.release.wait(30)

    def close(self) -> None:
        self.release.set()
        self._thread.join(30)


@pytest.mark.redis
def test_tenant_limits_are_exact_across_two_gateway_processes(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    with one_engine_config(endpoint_id="e1") as data:
        data = limited(limited(data, "acme", max_concurrent=3), "zeta", requests_per_min=5)
        with two_replicas(data, tmp_path, redis_url, key_prefix) as (a, b):
            urls = [g.base_url + "/v1/chat/completions" for g in (a, b)]
            streams = [HeldStream(urls[i % 2], TENANT_KEY) for i in range(8)]
            assert eventually(lambda: all(s.status is not None for s in streams), 20)
            for stream in streams:
                stream.close()
            statuses = sorted(s.status or 0 for s in streams)
            reasons = {s.reason for s in streams if s.status == 429}
            rate = [
                httpx.post(
                    urls[i % 2],
                    json=chat_body(max_tokens=2),
                    headers={"authorization": f"Bearer {OTHER_TENANT_KEY}"},
                    timeout=30,
                )
                for i in range(8)
            ]
    assert statuses == [200] * 3 + [429] * 5
    assert reasons == {"tenant_concurrency_limited"}
    assert [r.status_code for r in rate].count(200) == 5
    refused = [r for r in rate if r.status_code == 429]
    assert {r.headers["x-slo-gateway-reason"] for r in refused} == {"tenant_rate_limited"}
    assert all(int(r.headers["retry-after"]) >= 1 for r in refused)
    assert refused[0].json()["error"]["code"] == "tenant_rate_limited"


def test_hot_reload_mid_load_drops_nothing_and_rejects_an_invalid_file(tmp_path: Path) -> None:
    new_key_env = {"TEST_NEW_TENANT_KEY": "sk-test-new-tenant"}
    with (
        one_engine_config(endpoint_id="e1") as data,
        GatewayProcess(data, tmp_path, **new_key_env) as gateway,
    ):
        url = gateway.base_url + "/v1/chat/completions"
        new_tenant = {"authorization": "Bearer sk-test-new-tenant"}
        assert httpx.post(url, json=chat_body(), headers=new_tenant).status_code == 401
        with Load(gateway.base_url, threads=3, max_tokens=30) as load:  # as TENANT_KEY
            assert eventually(lambda: len(load.results) >= 10)
            data["tenants"]["newco"] = {
                "api_key_env": "TEST_NEW_TENANT_KEY",
                "allowed_classes": ["interactive"],
                "default_class": "interactive",
            }
            data["policy"] = {"name": "least_loaded"}
            gateway.config_path.write_text(yaml.safe_dump(data))
            assert gateway.process is not None
            gateway.process.send_signal(signal.SIGHUP)
            ok = httpx.post(url, json=chat_body(max_tokens=2), headers=new_tenant)
            assert eventually(lambda: _status(url, new_tenant) == 200)
            gateway.config_path.write_text("endpoints: [this is: not valid")
            assert eventually(lambda: _reloads(gateway.base_url, "rejected") == 1)
            assert _status(url, new_tenant) == 200  # the running config was kept
            seen = len(load.results)
            assert eventually(lambda: len(load.results) >= seen + 10)
    assert ok.status_code in (200, 401)  # racing the reload: either config, never an error
    assert load.results and not load.failures()  # each a 200 that ended with [DONE]


def _reloads(base_url: str, result: str) -> float:
    """slo_gateway_config_reloads_total{result=...} as /metrics shows it (0 before the first)."""
    series = f'slo_gateway_config_reloads_total{{result="{result}"}} '
    for line in httpx.get(base_url + "/metrics").text.splitlines():
        if line.startswith(series):
            return float(line.removeprefix(series))
    return 0.0


def _status(url: str, headers: dict[str, str]) -> int:
    return httpx.post(url, json=chat_body(max_tokens=2), headers=headers, timeout=30).status_code

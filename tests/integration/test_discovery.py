"""A DNS-discovered pool grows and shrinks under load with zero failed requests: engines on
127.0.0.2 and 127.0.0.3 (one port, as a headless Service's pods), a scripted DNS server on
loopback that the gateway polls, and a stream to the member that leaves finishing whole."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from gateway.sim.engine import create_engine_app
from tests.faults.clients import Load
from tests.fixtures.dns_server import ScriptedDns
from tests.fixtures.gateway import (
    ADMIN_KEY,
    ENGINE_MODEL,
    PUBLIC_MODEL,
    TENANT_KEY,
    chat_body,
    config,
    counter_sum,
    engine,
    eventually,
    running_gateway,
)
from tests.fixtures.servers import UvicornThread

pytestmark = pytest.mark.integration
AUTH = {"authorization": f"Bearer {TENANT_KEY}"}
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
HOSTS = ["127.0.0.2", "127.0.0.3"]


def shared_port() -> int:
    """A port free on every host of HOSTS."""
    while True:
        with socket.socket() as first:
            first.bind((HOSTS[0], 0))
            port: int = first.getsockname()[1]
            with socket.socket() as second:
                try:
                    second.bind((HOSTS[1], port))
                except OSError:
                    continue
            return port


@contextmanager
def engines(port: int) -> Iterator[None]:
    servers = [UvicornThread(create_engine_app(engine()), host=h, port=port) for h in HOSTS]
    for server in servers:
        server.start()
    try:
        yield
    finally:
        for server in servers:
            server.stop()


def phases(base_url: str) -> dict[str, str]:
    endpoints: dict[str, str] = httpx.get(base_url + "/readyz").json()["endpoints"]
    return endpoints


def dashboard_members(base_url: str) -> set[str]:
    board = httpx.get(base_url + "/admin/dashboard.json", headers=ADMIN).json()
    return {entry["id"] for entry in board["endpoints"]}


def served_by(base_url: str, member: str) -> float:
    metrics = httpx.get(base_url + "/metrics").text
    return counter_sum(metrics, "slo_gateway_requests_total", endpoint=member, outcome="ok")


def test_a_discovered_pool_grows_and_shrinks_under_load_losing_nothing() -> None:
    port = shared_port()
    first, second = (f"pool-{h}-{port}" for h in HOSTS)
    with ScriptedDns() as dns, engines(port):
        dns.set("vllm.test.", "A", HOSTS[:1])
        group = {
            "name": "pool",
            "dns": "vllm.test.",
            "port": port,
            "nameservers": [dns.address],
            "poll_interval_s": 0.2,
            "member": {"kind": "vllm", "models": {PUBLIC_MODEL: ENGINE_MODEL}},
        }
        data = config([], endpoint_groups=[group])
        with running_gateway(data) as gateway, Load(gateway.base_url, threads=4) as load:
            base = gateway.base_url
            assert eventually(lambda: served_by(base, first) >= 10)
            body = chat_body(max_tokens=200, stream=True)
            with httpx.stream("POST", base + "/v1/chat/completions", json=body, headers=AUTH) as s:
                lines = s.iter_lines()
                assert next(lines).startswith("data:")  # on the only member: the first
                dns.set("vllm.test.", "A", HOSTS)  # grows
                assert eventually(lambda: served_by(base, second) >= 10)
                assert dashboard_members(base) == {first, second}
                dns.set("vllm.test.", "A", HOSTS[1:])  # shrinks: the stream's member leaves
                assert eventually(lambda: phases(base).get(first) == "withdrawn")
                rest = list(lines)
            assert "data: [DONE]" in rest  # the stream on the member that left finished whole
            time.sleep(0.5)  # its own count lands once its response has ended
            left_at = served_by(base, first)
            assert eventually(lambda: served_by(base, second) >= 30)
            assert served_by(base, first) == left_at  # nothing routed to it since
            metrics = httpx.get(base + "/metrics").text
        assert counter_sum(metrics, "slo_gateway_discovered_members", group="pool") == 1
        assert counter_sum(metrics, "slo_gateway_discovery_changes_total", change="added") == 2
        assert counter_sum(metrics, "slo_gateway_discovery_changes_total", change="removed") == 1
    assert load.results and load.failures() == []
    assert {r.endpoint for r in load.results} == {first, second}

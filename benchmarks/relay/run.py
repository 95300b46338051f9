"""Start everything, run every phase against every system in interleaved rounds, stop everything.

Rounds interleave: each repeat runs one phase on every system (in an order rotated per repeat)
before the next phase, so a burst of load from other users of the machine spreads over all
systems instead of sinking one of them; the report takes medians over repeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.relay import litellm_proxy
from benchmarks.relay.backend import KEY_PREFIX, TENANT_KEY, UPSTREAM_MODEL
from benchmarks.relay.load import SystemUnderTest, chat_request, request_bytes
from benchmarks.relay.phases import PHASES, Phase, measure_phase
from benchmarks.relay.procs import Running, free_port, rss_mb, self_cpu_s, start, wait_ready
from benchmarks.relay.systems import (
    DIRECT,
    LITELLM,
    catalogue,
    on_redis,
    start_redis,
)

PROMPT = "Summarise the following paragraph in one sentence. " * 8
REDIS_ENV = ("GATEWAY_REDIS_URL", "REDIS_URL")
FALLBACK_LOG = "shared store unavailable"  # the gateway fell back from Redis to local state


@dataclass
class Options:
    systems: tuple[str, ...]
    repeats: int
    open_s: float
    closed_s: float
    warm_s: float
    tokens: int
    events_per_write: int
    policy: str
    logs: Path
    redis_url: str | None = None
    candidates: dict[str, Path] = field(default_factory=dict)  # system name -> source tree
    phases: tuple[Phase, ...] = PHASES
    proxy_core: int = 0
    load_core: int = 0


@dataclass
class Fleet:
    backend: Running
    servers: dict[str, Running] = field(default_factory=dict)
    redis: Running | None = None
    redis_url: str | None = None

    def cpu(self, system: str) -> dict[str, float]:
        server = self.servers.get(system)
        return {
            "proxy": server.cpu_s() if server else 0.0,
            "backend": self.backend.cpu_s(),
            "redis": self.redis.cpu_s() if self.redis else 0.0,
        }

    def stop(self) -> None:
        for server in [*self.servers.values(), self.backend, *([self.redis] if self.redis else [])]:
            server.stop()


def body(stream: bool) -> dict[str, object]:
    return chat_request(PROMPT, max_tokens=64, stream=stream)


def make_target(name: str, port: int) -> SystemUnderTest:
    path = "/v1/chat/completions"
    plain = request_bytes("127.0.0.1", port, path, body(False) | _model(name), TENANT_KEY)
    stream = request_bytes("127.0.0.1", port, path, body(True) | _model(name), TENANT_KEY)
    return SystemUnderTest(name, port, plain, stream)


def _model(name: str) -> dict[str, str]:
    return {"model": UPSTREAM_MODEL} if name == DIRECT else {}


def _env(system: str, redis_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in REDIS_ENV}
    if on_redis(system) and redis_url:
        env["GATEWAY_REDIS_URL"] = redis_url
    if system == LITELLM:
        env = litellm_proxy.environment()
    return env


@contextlib.asynccontextmanager
async def fleet(options: Options) -> AsyncIterator[Fleet]:
    backend_port = free_port()
    argv = [
        sys.executable,
        "-m",
        "benchmarks.relay.backend",
        "--port",
        str(backend_port),
        "--tokens",
        str(options.tokens),
        "--events-per-write",
        str(options.events_per_write),
    ]
    running = Fleet(start("backend", argv, backend_port, options.load_core, options.logs))
    try:
        await _start_all(running, options)
        yield running
    finally:
        running.stop()


async def _start_all(running: Fleet, options: Options) -> None:
    upstream = f"http://127.0.0.1:{running.backend.port}/v1"
    if any(on_redis(name) for name in options.systems):
        running.redis_url = options.redis_url or await _own_redis(running, options)
    specs = catalogue(options.policy, tuple(options.candidates))
    waits = [wait_ready(running.backend, "/health", 10.0)]
    for name in options.systems:
        if name == DIRECT:
            continue
        spec, port = specs[name], free_port()
        env, cwd = _env(name, running.redis_url), None
        if name in options.candidates:
            # the candidate's own `gateway` package first; the harness's modules as a fallback
            cwd, env["PYTHONPATH"] = options.candidates[name], os.getcwd()
        argv = spec.argv(port, upstream)
        cores = ",".join(map(str, sorted(os.sched_getaffinity(0) | {options.proxy_core})))
        core = cores if spec.all_cores else str(options.proxy_core)
        server = start(name, argv, port, core, options.logs, env, cwd)
        running.servers[name] = server
        waits.append(wait_ready(server, spec.ready_path, spec.start_timeout_s))
    await asyncio.gather(*waits)


async def _own_redis(running: Fleet, options: Options) -> str:
    running.redis = start_redis(options.load_core, options.logs)
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            reader, writer = await asyncio.open_connection("127.0.0.1", running.redis.port)
            writer.write(b"PING\r\n")
            reply = await reader.readline()
            writer.close()
            if reply.startswith(b"+PONG"):
                return f"redis://127.0.0.1:{running.redis.port}/0"
        await asyncio.sleep(0.1)
    raise RuntimeError(f"redis did not start; see {running.redis.log}")


def rounds(options: Options) -> Iterator[tuple[int, Phase, str]]:
    """(repeat, phase, system) in interleaved, rotated order."""
    names = list(options.systems)
    for repeat in range(options.repeats):
        order = names[repeat % len(names) :] + names[: repeat % len(names)]
        for phase in options.phases:
            for name in order:
                yield repeat, phase, name


async def run(options: Options) -> dict[str, Any]:
    records: list[dict[str, Any]] = []
    rss: dict[str, dict[str, float]] = {}
    started = time.perf_counter()
    cpu_at_start = self_cpu_s()
    async with fleet(options) as running:
        targets = {name: make_target(name, _port(running, name)) for name in options.systems}
        rss = {name: {"idle_mb": _rss(running, name)} for name in options.systems}
        for repeat, phase, name in rounds(options):
            duration = options.open_s if phase.rate_per_s else options.closed_s
            cpu = functools.partial(running.cpu, name)
            record = await measure_phase(targets[name], phase, duration, options.warm_s, cpu)
            records.append({"system": name, "phase": phase.name, "repeat": repeat} | record)
            rss[name]["loaded_mb"] = max(rss[name].get("loaded_mb", 0.0), _rss(running, name))
        for target in targets.values():
            target.close()
        redis_keys = _redis_keys(running.redis_url) if running.redis_url else None
        fallbacks = {
            name: server.log.read_text(errors="replace").count(FALLBACK_LOG)
            for name, server in running.servers.items()
        }
    return {
        "store_fallbacks": {name: count for name, count in fallbacks.items() if count},
        "records": records,
        "rss": rss,
        "redis_keys": redis_keys,
        "elapsed_s": round(time.perf_counter() - started, 1),
        "harness_cpu_s": round(self_cpu_s() - cpu_at_start, 2),
    }


def _port(running: Fleet, name: str) -> int:
    return running.backend.port if name == DIRECT else running.servers[name].port


def _rss(running: Fleet, name: str) -> float:
    server = running.servers.get(name)
    return round(rss_mb(server.pid), 1) if server else 0.0


def _redis_keys(url: str) -> int:
    """Keys the gateway left in Redis: proof the Redis store was the one in use."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        return sum(1 for _ in client.scan_iter(match=KEY_PREFIX + "*", count=1000))
    finally:
        client.close()

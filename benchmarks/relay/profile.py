"""Where a relay's CPU goes under load: py-spy samples, summarised as percentages.

    .venv/bin/python -m benchmarks.relay.profile [--system gateway-memory] [--stream]

Starts the mock endpoint and one system (pinned as in the main benchmark), drives it closed
loop at 64 in flight, attaches py-spy (a benchmark-only dependency: pip install py-spy) for the
measured seconds, and reports three views of the samples:

    self time by area      the innermost Python frame's package, or module for our own code
    self time by function  the innermost Python frame itself
    our functions          share of samples with the function anywhere on the stack
    stack share by package share of samples with any frame of the package on the stack

A sample whose innermost frame is the event loop's `run` is time in uvloop's C code (socket
I/O, the loop itself). Percentages are of on-CPU samples.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import uvloop

from benchmarks.relay.load import closed_loop
from benchmarks.relay.procs import Running, cores, free_port, start, wait_ready
from benchmarks.relay.run import make_target
from benchmarks.relay.systems import GATEWAY, GATEWAY_REDIS, catalogue, start_redis

OURS = ("gateway/", "policies/")
SKIPPED_PACKAGES = ("<frozen runpy>", "relay")  # the launcher: on every stack
LOOP_LEAF = "Runner.run (asyncio/runners.py"
LOOP_AREA = "event loop (uvloop C, socket I/O)"
WARM_S = 1.0


def area(frame: str) -> str:
    """`Router.rank (gateway/server/router.py:80)` -> `gateway/server/router.py`; library
    frames -> their package."""
    where = frame[frame.rfind("(") + 1 : frame.rfind(":")]
    if where.startswith(OURS):
        return where
    head = where.split("/", 1)[0]
    return head.removesuffix(".py") or where


def function(frame: str) -> str:
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit(':', 1)[0]})"


def read_stacks(path: Path) -> list[tuple[list[str], int]]:
    stacks = []
    for line in path.read_text().splitlines():
        frames, _, count = line.rpartition(" ")
        if frames and count.isdigit():
            stacks.append((frames.split(";"), int(count)))
    return stacks


def summarise(stacks: list[tuple[list[str], int]]) -> dict[str, Counter[str]]:
    views: dict[str, Counter[str]] = {
        "self": Counter(),
        "leaf": Counter(),
        "ours": Counter(),
        "packages": Counter(),
    }
    for frames, count in stacks:
        leaf = frames[-1]
        in_loop = leaf.startswith(LOOP_LEAF)
        views["self"][LOOP_AREA if in_loop else area(leaf)] += count
        views["leaf"][LOOP_AREA if in_loop else function(leaf)] += count
        for name in {function(f) for f in frames if area(f).startswith(OURS)}:
            views["ours"][name] += count
        for package in {area(f).split("/", 1)[0] for f in frames} - set(SKIPPED_PACKAGES):
            views["packages"][package] += count
    return views


def render(views: dict[str, Counter[str]], total: int, top: int, title: str) -> str:
    headings = {
        "self": "Self time by area",
        "leaf": "Self time by function",
        "ours": "Our functions (inclusive)",
        "packages": "Stack share by package",
    }
    lines = [f"# Profile: {title}", "", f"{total} on-CPU samples.", ""]
    for key, heading in headings.items():
        lines += [f"## {heading}", "", "| | % of samples |", "|---|---|"]
        lines += [f"| {name} | {100 * n / total:.1f} |" for name, n in views[key].most_common(top)]
        lines.append("")
    return "\n".join(lines)


async def _profile(args: argparse.Namespace, logs: Path, output: Path) -> None:
    proxy_core, load_core = cores()[0], cores()[-1]
    backend_port, port = free_port(), free_port()
    argv = [sys.executable, "-m", "benchmarks.relay.backend", "--port", str(backend_port)]
    servers = [start("backend", argv, backend_port, load_core, logs)]
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("GATEWAY_REDIS_URL", "REDIS_URL")}
        if args.system == GATEWAY_REDIS:
            servers.append(start_redis(load_core, logs))
            await asyncio.sleep(0.5)
            env["GATEWAY_REDIS_URL"] = f"redis://127.0.0.1:{servers[-1].port}/0"
        spec = catalogue("slo_aware")[args.system]
        upstream = f"http://127.0.0.1:{backend_port}/v1"
        system = start(args.system, spec.argv(port, upstream), port, proxy_core, logs, env)
        servers.append(system)
        await wait_ready(servers[0], "/health", 10.0)
        await wait_ready(system, spec.ready_path, spec.start_timeout_s)
        await _sample(system, args, output, load_core, spec.all_cores)
    finally:
        for server in servers:
            server.stop()


async def _sample(
    system: Running, args: argparse.Namespace, output: Path, core: int, workers: bool
) -> None:
    """`workers`: `serve --workers N`, whose requests run in the supervisor's children."""
    target = make_target(args.system, system.port)
    await closed_loop(target, args.concurrency, WARM_S, args.stream)
    spy = subprocess.Popen(
        [
            "taskset",
            "-c",
            str(core),
            str(Path(sys.executable).parent / "py-spy"),
            "record",
            "--pid",
            str(system.pid),
            "--duration",
            str(args.seconds),
            "--rate",
            str(args.rate),
            *(["--subprocesses"] if workers else []),
            "--format",
            "raw",
            "--output",
            str(output),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    tally = await closed_loop(target, args.concurrency, args.seconds + 0.5, args.stream)
    spy.wait()
    target.close()
    ok = sum(1 for s in tally.samples if s.ok)
    print(f"{ok} requests in {tally.wall_s:.1f} s under the profiler", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.relay.profile", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--system", default=GATEWAY, choices=sorted(catalogue("slo_aware")))
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rate", type=int, default=200, help="py-spy samples per second")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("reports"))
    args = parser.parse_args()
    if not (Path(sys.executable).parent / "py-spy").exists():  # else a missing report, later
        raise SystemExit("py-spy is not installed: .venv/bin/pip install py-spy")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    logs = args.out / f"profile-logs-{stamp}"
    logs.mkdir(parents=True, exist_ok=True)
    raw = args.out / f"profile-{args.system}-{'stream' if args.stream else 'plain'}-{stamp}.txt"
    os.sched_setaffinity(0, {cores()[-1]})
    uvloop.run(_profile(args, logs, raw))
    stacks = read_stacks(raw)
    total = sum(count for _, count in stacks)
    title = (
        f"{args.system}, {'streamed' if args.stream else 'non-streamed'}, "
        f"{args.concurrency} in flight"
    )
    text = render(summarise(stacks), total, args.top, title)
    raw.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

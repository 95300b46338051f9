"""Relay overhead: slo-gateway against a bare relay floor, direct-to-endpoint and LiteLLM.

    .venv/bin/python -m benchmarks.relay            # full run, about 10 minutes
    .venv/bin/python -m benchmarks.relay --quick    # a few seconds: proves the harness runs

Writes reports/relay-overhead-<time>.md and .json and prints the markdown. See
docs/performance.md for what each figure means and how to read it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

import uvloop

from benchmarks.relay import figures, litellm_proxy, markdown, micro
from benchmarks.relay.phases import PHASES
from benchmarks.relay.procs import cores
from benchmarks.relay.run import Options, run
from benchmarks.relay.systems import (
    CANDIDATE,
    CANDIDATE_REDIS,
    FLOOR,
    FULL,
    LITELLM,
    OPTIONAL,
    QUICK,
    catalogue,
)

NAMES = [phase.name for phase in PHASES]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.relay", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a few seconds, 1 repeat")
    known = ", ".join(FULL + OPTIONAL)
    parser.add_argument("--systems", help=f"comma-separated subset of: {known}")
    parser.add_argument("--phases", help=f"comma-separated subset of: {', '.join(NAMES)}")
    parser.add_argument("--repeats", type=int, help="rounds to take medians over (3; quick 1)")
    parser.add_argument("--seconds", type=float, help="open-loop phase length (4; quick 0.2)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per streamed answer")
    parser.add_argument(
        "--events-per-write",
        type=int,
        default=1,
        help="SSE events the mock flushes at once (0: whole stream)",
    )
    parser.add_argument("--policy", default="slo_aware", help="the gateway's routing policy")
    parser.add_argument("--redis-url", help="use this Redis instead of starting one")
    parser.add_argument("--litellm", action="store_true", help="include LiteLLM in --quick")
    parser.add_argument("--no-litellm", action="store_true", help="leave LiteLLM out")
    parser.add_argument(
        "--candidate",
        type=Path,
        action="append",
        default=[],
        help="also run the gateway from this source tree (an A/B of a change; repeatable)",
    )
    parser.add_argument(
        "--candidate-redis",
        type=Path,
        action="append",
        default=[],
        help="also run the gateway from this source tree on the Redis store",
    )
    parser.add_argument("--out", type=Path, default=Path("reports"))
    return parser.parse_args(argv)


def options(args: argparse.Namespace, logs: Path) -> Options:
    chosen = tuple(args.systems.split(",")) if args.systems else (QUICK if args.quick else FULL)
    if args.quick and args.litellm and LITELLM not in chosen:
        chosen += (LITELLM,)
    candidates = {f"{CANDIDATE}{tree.name}": tree.resolve() for tree in args.candidate}
    candidates |= {f"{CANDIDATE_REDIS}{tree.name}": tree.resolve() for tree in args.candidate_redis}
    chosen += tuple(name for name in candidates if name not in chosen)
    if args.no_litellm:
        chosen = tuple(s for s in chosen if s != LITELLM)
    unknown = set(chosen) - set(FULL) - set(OPTIONAL) - set(candidates)
    if unknown:
        raise SystemExit(f"unknown systems: {sorted(unknown)}")
    phases = tuple(p for p in PHASES if not args.phases or p.name in args.phases.split(","))
    open_s = args.seconds or (0.2 if args.quick else 4.0)
    available = cores()
    return Options(
        systems=chosen,
        repeats=args.repeats or (1 if args.quick else 3),
        open_s=open_s,
        closed_s=open_s * 0.75,
        warm_s=0.05 if args.quick else 0.5,
        tokens=args.tokens,
        events_per_write=args.events_per_write,
        policy=args.policy,
        logs=logs,
        redis_url=args.redis_url,
        candidates=candidates,
        phases=phases,
        proxy_core=available[0],
        load_core=available[-1],
    )


def machine() -> str:
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    python = sys.version.split()[0]
    return f"{model}, {os.cpu_count()} cores, Linux {platform.release()}, Python {python}"


def versions(systems: tuple[str, ...]) -> dict[str, str]:
    found = {
        name: metadata.version(name)
        for name in ("fastapi", "uvicorn", "aiohttp", "httpx", "httpx-aiohttp", "uvloop", "redis")
    }
    if LITELLM in systems:
        found["litellm"] = litellm_proxy.version()
    return found


def _describe(opts: Options) -> str:
    flush = opts.events_per_write or "all"
    return (
        f"{opts.repeats} repeats; open-loop phases {opts.open_s:g} s, closed-loop "
        f"{opts.closed_s:g} s; {opts.tokens} tokens per stream, {flush} event(s) per write; "
        f"policy {opts.policy}; proxy on core {opts.proxy_core}, mock, Redis and load "
        f"generator on core {opts.load_core}"
    )


def assemble(raw: dict[str, Any], opts: Options, quick: bool) -> dict[str, Any]:
    specs = catalogue(opts.policy, tuple(opts.candidates))
    labels = {
        name: specs[name].label if name in specs else "direct to the mock endpoint"
        for name in opts.systems
    }
    summary = figures.summarise(raw["records"], opts.systems)
    for name, sizes in raw["rss"].items():
        summary[name] |= {
            "rss_idle_mb": sizes.get("idle_mb"),
            "rss_loaded_mb": sizes.get("loaded_mb"),
        }
    notes = [
        f"Run took {raw['elapsed_s']} s; the harness itself used {raw['harness_cpu_s']} CPU-s."
    ]
    if raw["redis_keys"] is not None:
        notes.append(f"Redis store check: {raw['redis_keys']} gateway keys in Redis after the run.")
    for name, count in raw["store_fallbacks"].items():
        notes.append(
            f"WARNING: {name} fell back from Redis to local state {count} time(s) "
            "during the run (see its log): its figures are partly the memory store's."
        )
    return {
        "meta": {
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": machine(),
            "command": " ".join(["python -m benchmarks.relay", *sys.argv[1:]]),
            "settings": _describe(opts),
            "versions": versions(opts.systems),
        },
        "labels": labels,
        "summary": summary,
        "saturated": {s: figures.saturated(raw["records"], s) for s in opts.systems},
        "ratios": {ref: figures.ratios(summary, ref) for ref in (FLOOR, LITELLM)},
        "targets": figures.targets(summary),
        "micro": micro.measure(quick),
        "notes": notes,
        "store_fallbacks": raw["store_fallbacks"],
        "rss": raw["rss"],
        "records": raw["records"],
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    logs = args.out / f"relay-logs-{stamp}"
    logs.mkdir(parents=True, exist_ok=True)
    opts = options(args, logs)
    if LITELLM in opts.systems:
        litellm_proxy.ensure_installed(logs / "litellm-install.log")
    os.sched_setaffinity(0, {opts.load_core})
    result = assemble(uvloop.run(run(opts)), opts, args.quick)
    text = markdown.render(result)
    (args.out / f"relay-overhead-{stamp}.json").write_text(json.dumps(result, indent=1))
    (args.out / f"relay-overhead-{stamp}.md").write_text(text)
    print(text)
    return result


if __name__ == "__main__":
    main()

"""The gateway's own cost per request, counted in CPU instructions: the benchmark's app in
process over an in-process upstream (tests/fixtures/upstream_fakes.py), so no HTTP library,
load generator or neighbour's job is counted: two trees compare to within about 1% on a quiet
host (beside busy jobs about 3%: the running-stream reports go by time, which callgrind slows).

Each measurement runs under callgrind twice, with 0 and with N requests after the same warm-up,
and reports the difference over N: the instructions one request adds. The periodic tasks (view
refresh, scraper, dashboard sampler) are cancelled after the warm-up, because under callgrind
wall time is about 50x longer and they would run 50x more often per request. Streams are the
relay benchmark's (64 tokens, `--events` events per read; 1 is the relay benchmark's default).

Run: python -m benchmarks.relay.instructions [--candidate DIR ...] [--requests 150]
     (needs valgrind; `apt-get install valgrind`). Bisect a regression by passing worktrees of
     the commits in between as candidates.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

_COLLECTED = re.compile(r"Collected : (\d+)")


def _chunks(events_per_read: int) -> tuple[list[bytes], bytes]:
    from benchmarks.relay.backend import completion_response, stream_frames

    events = [f.split(b"\r\n", 1)[1].rsplit(b"\r\n", 1)[0] for f in stream_frames(64)[:-1]]
    k = events_per_read
    return [b"".join(events[i : i + k]) for i in range(0, len(events), k)], completion_response(
        64
    ).split(b"\r\n\r\n", 1)[1]


async def one_request(app: Any, stream: bool) -> None:
    """One chat request through `app` over ASGI, in process; raises unless it answered 200."""
    from benchmarks.relay.backend import PUBLIC_MODEL, TENANT_KEY

    content = "Say hello to the benchmark please"
    body = json.dumps(
        {"model": PUBLIC_MODEL, "stream": stream, "max_tokens": 64,
         "messages": [{"role": "user", "content": content}]}
    ).encode()  # fmt: skip
    headers = [
        (b"host", b"127.0.0.1"),
        (b"authorization", b"Bearer " + TENANT_KEY.encode()),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions",
        "query_string": b"", "root_path": "", "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 9002), "headers": headers, "state": {},
    }  # fmt: skip
    sent: list[dict[str, Any]] = []
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client stays
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    # Not tests.fixtures' Client: this runs inside older trees (the candidates), whose Client
    # may not give a body.
    await app(scope, receive, send)
    if sent[0]["status"] != 200:
        raise SystemExit(f"the gateway answered {sent[0]}")


@contextlib.asynccontextmanager
async def in_process_app(events_per_read: int) -> AsyncIterator[Any]:
    """The benchmark's gateway app, its lifespan running, over an in-process upstream that
    answers the relay benchmark's 64-token stream (`events_per_read` events per read) or its
    whole completion: no HTTP library or load generator is counted."""
    from benchmarks.relay.gateway_server import build_app
    from tests.fixtures.upstream_fakes import Answer, FakeUpstream

    chunks, whole = _chunks(events_per_read)

    def answer(endpoint: Any, call: Any) -> Answer:
        if call.stream:
            return Answer(chunks, headers={"content-type": "text/event-stream"})
        return Answer([whole])

    app = build_app("http://127.0.0.1:9/v1", "slo_aware")
    async with app.router.lifespan_context(app):
        runtime = app.state.runtime
        # the forwarder holds the upstream; in trees before it had its own class, the router
        holder = getattr(runtime, "forwarder", None) or runtime.router
        holder.upstream = FakeUpstream(answer)
        yield app


async def _serve(requests: int, stream: bool, events_per_read: int) -> None:
    """Inside the measured process: warm up, quieten, then `requests` requests."""
    async with in_process_app(events_per_read) as app:
        for _ in range(20):
            await one_request(app, stream)
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()
        await asyncio.sleep(0.05)
        for _ in range(requests):
            await one_request(app, stream)


def _instructions(tree: Path, requests: int, stream: bool, events: int) -> int:
    with tempfile.TemporaryDirectory(prefix="sg-cg-") as tmp:
        command = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out",
            # this file, run in `tree` (its gateway and its benchmark app, which older trees have)
            sys.executable, str(Path(__file__).resolve()), "--inside",
            "--requests", str(requests), "--events", str(events),
        ] + (["--stream"] if stream else [])  # fmt: skip
        env = os.environ | {"PYTHONHASHSEED": "0", "PYTHONPATH": str(tree)}
        done = subprocess.run(
            command, cwd=tree, env=env, capture_output=True, text=True, check=False
        )
        found = _COLLECTED.search(done.stderr)
        if done.returncode or found is None:
            raise SystemExit(f"callgrind in {tree} failed:\n{done.stderr[-2000:]}")
        return int(found.group(1))


def per_request(tree: Path, requests: int, stream: bool, events: int) -> int:
    """The instructions one request adds in `tree` (N requests minus none, over N)."""
    base = _instructions(tree, 0, stream, events)
    return (_instructions(tree, requests, stream, events) - base) // requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidate", action="append", default=[], type=Path)
    parser.add_argument("--requests", type=int, default=150)
    parser.add_argument("--events", type=int, default=1, help="stream events per read")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--stream", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        sys.stdout = open(os.devnull, "w")  # the request log  # noqa: SIM115
        asyncio.run(_serve(args.requests, args.stream, args.events))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    here = Path(__file__).resolve().parents[2]
    trees = [here, *(c.resolve() for c in args.candidate)]
    print(f"| tree | streamed, {args.events} event(s) per read | non-streamed | vs this tree |")
    print("|---|---|---|---|")
    first: tuple[int, int] | None = None
    for tree in trees:
        stream = per_request(tree, args.requests, True, args.events)
        whole = per_request(tree, args.requests, False, args.events)
        first = first or (stream, whole)
        ratio = f"{stream / first[0]:.3f} / {whole / first[1]:.3f}"
        print(f"| {tree} | {stream:,} | {whole:,} | {ratio} |")


if __name__ == "__main__":
    main()

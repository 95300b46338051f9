"""The load generator: a bare HTTP/1.1 keep-alive client on asyncio protocols and httptools.

It is written at this level so that it costs a few microseconds per request and per chunk, far
below any relay under test; the harness reports its CPU share so that claim can be checked in
every run. One `SystemUnderTest` holds a pool of idle connections across phases (warmed once). Two
drivers: `open_loop` sends at a fixed rate whatever the answers do (a new connection when none
is idle, so a stalled relay cannot slow the sender down and hide its queueing); `closed_loop`
keeps a fixed number of requests in flight for a fixed time. A request is timed from before a
connection is taken, so connection set-up on a busy relay counts against it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from dataclasses import dataclass, field
from typing import cast

import httptools

from benchmarks.relay.backend import PUBLIC_MODEL, TOKEN

MAX_IN_FLIGHT = 512  # open loop: beyond this a request is counted dropped, not sent
DRAIN_S = 5.0  # open loop: how long stragglers may finish after the sending window


@dataclass(slots=True)
class CallResult:
    ok: bool
    latency_ms: float = 0.0
    ttft_ms: float | None = None
    tokens: int = 0


@dataclass(slots=True)
class Tally:
    """What one phase produced at the client."""

    samples: list[CallResult] = field(default_factory=list)
    dropped: int = 0
    timeouts: int = 0
    wall_s: float = 0.0
    scheduled: int = 0


def chat_request(prompt: str, *, max_tokens: int, stream: bool) -> dict[str, object]:
    """The chat completion the relay benchmarks send: the public model, a short system prompt."""
    return {
        "model": PUBLIC_MODEL,
        "messages": [
            {"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": prompt},
        ],
        "max_tokens": max_tokens,
        "temperature": 0.2,
        "stream": stream,
    }


def request_bytes(host: str, port: int, path: str, body: dict[str, object], key: str) -> bytes:
    raw = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer {key}\r\ncontent-length: {len(raw)}\r\n\r\n"
    )
    return head.encode() + raw


class _Connection(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[bool] | None = None
        self.body = bytearray()
        self.first_token_ns = 0
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._finish(False)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.lost = True
            self._finish(False)
            self.close()

    def on_body(self, body: bytes) -> None:
        if not self.first_token_ns and TOKEN.encode() in body:
            self.first_token_ns = time.perf_counter_ns()
        self.body += body

    def on_message_complete(self) -> None:
        keep = self.parser.should_keep_alive()
        self.lost = self.lost or not keep
        self._finish(self.parser.get_status_code() == 200)

    def send(self, data: bytes) -> asyncio.Future[bool]:
        assert self.transport is not None
        self.body = bytearray()
        self.first_token_ns = 0
        self.done = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return self.done

    def _finish(self, ok: bool) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(ok)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.abort()


class SystemUnderTest:
    """A system under test, seen from the client: an address, canned requests, a pool."""

    def __init__(self, name: str, port: int, plain: bytes, stream: bytes) -> None:
        self.name = name
        self.port = port
        self.requests = {False: plain, True: stream}
        self._idle: deque[_Connection] = deque()

    async def _connection(self) -> _Connection:
        while self._idle:
            conn = self._idle.pop()
            if not conn.lost:
                return conn
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(_Connection, "127.0.0.1", self.port)
        return conn

    async def call(self, stream: bool, timeout_s: float) -> CallResult:
        """One request; latency and TTFT count from before a connection is taken (or opened)."""
        started_ns = time.perf_counter_ns()
        conn = await self._connection()
        try:
            ok = await asyncio.wait_for(conn.send(self.requests[stream]), timeout_s)
        except (TimeoutError, asyncio.CancelledError):
            conn.close()
            raise
        end_ns = time.perf_counter_ns()
        if conn.lost:
            conn.close()
        else:
            self._idle.append(conn)
        ttft = (conn.first_token_ns - started_ns) / 1e6 if conn.first_token_ns else None
        tokens = bytes(conn.body).count(TOKEN.encode()) if stream else 0
        return CallResult(ok, (end_ns - started_ns) / 1e6, ttft, tokens)

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()


async def _safe_call(target: SystemUnderTest, stream: bool, timeout_s: float) -> CallResult:
    try:
        return await target.call(stream, timeout_s)
    except OSError:
        return CallResult(ok=False)


async def closed_loop(
    target: SystemUnderTest, concurrency: int, duration_s: float, stream: bool
) -> Tally:
    tally = Tally()
    stop_ns = time.perf_counter_ns() + int(duration_s * 1e9)
    timeout_s = duration_s + DRAIN_S

    async def worker() -> None:
        while time.perf_counter_ns() < stop_ns:
            try:
                sample = await _safe_call(target, stream, timeout_s)
            except TimeoutError:
                tally.timeouts += 1
                continue
            tally.samples.append(sample)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    tally.wall_s = time.perf_counter() - started
    tally.scheduled = len(tally.samples) + tally.timeouts
    return tally


async def open_loop(target: SystemUnderTest, rate: float, duration_s: float, stream: bool) -> Tally:
    tally = Tally()
    interval_ns = int(1e9 / rate)
    count = int(duration_s * rate)
    tasks: set[asyncio.Task[CallResult]] = set()
    begin_ns = time.perf_counter_ns()
    for i in range(count):
        due_ns = begin_ns + i * interval_ns
        await asyncio.sleep(max(0.0, (due_ns - time.perf_counter_ns()) / 1e9))
        tasks = {t for t in tasks if not _collect(t, tally)}
        if len(tasks) >= MAX_IN_FLIGHT:
            tally.dropped += 1
            continue
        tasks.add(asyncio.ensure_future(_safe_call(target, stream, duration_s + DRAIN_S)))
    if tasks:
        await asyncio.wait(tasks, timeout=DRAIN_S)
    for task in tasks:
        if not _collect(task, tally):
            task.cancel()
            tally.timeouts += 1
    tally.wall_s = (time.perf_counter_ns() - begin_ns) / 1e9
    tally.scheduled = count
    return tally


def _collect(task: asyncio.Task[CallResult], tally: Tally) -> bool:
    """Move a finished task's sample into the tally; False while it still runs."""
    if not task.done():
        return False
    if task.cancelled() or task.exception() is not None:
        tally.timeouts += 1
    else:
        tally.samples.append(task.result())
    return True


async def get_status(port: int, path: str, timeout_s: float = 1.0) -> int:
    """Status of a GET, or 0 when nothing answers (used to wait for a server to come up)."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), timeout_s
        )
    except (OSError, TimeoutError):
        return 0
    try:
        head = f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n"
        writer.write(head.encode())
        line = await asyncio.wait_for(reader.readline(), timeout_s)
    except (OSError, TimeoutError):
        return 0
    finally:
        writer.close()
    parts = line.split()
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0

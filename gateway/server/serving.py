"""Run several ASGI apps under uvicorn in one event loop, stopping all of them on SIGINT/SIGTERM.

uvicorn's own signal capture assumes one server per process; here the signal handler asks every
server to exit, so a demo fleet plus gateway stops cleanly together.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp


@dataclass(frozen=True, slots=True)
class Served:
    name: str
    app: ASGIApp
    port: int


class _QuietServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the caller owns signals
        yield


def make_server(app: ASGIApp, host: str, port: int, log_level: str = "warning") -> uvicorn.Server:
    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, lifespan="on", access_log=False
    )
    return _QuietServer(config)


async def serve_all(
    served: Sequence[Served],
    host: str,
    log_level: str = "warning",
    ready: asyncio.Event | None = None,
) -> None:
    servers = [make_server(s.app, host, s.port, log_level) for s in served]
    loop = asyncio.get_running_loop()

    def stop() -> None:
        for server in servers:
            server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)
    tasks = [asyncio.create_task(server.serve()) for server in servers]
    if ready is not None:
        while not all(server.started for server in servers):
            if any(task.done() for task in tasks):
                break
            await asyncio.sleep(0.05)
        ready.set()
    await asyncio.gather(*tasks)

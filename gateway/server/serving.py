"""uvicorn servers that leave signals to their caller, so one handler can stop several servers
in one event loop together (the demo's fleet and gateway: gateway/server/demo.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import uvicorn
from starlette.types import ASGIApp


class _QuietServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # the caller owns signals
        yield


def make_server(app: ASGIApp, host: str, port: int, log_level: str = "warning") -> uvicorn.Server:
    config = uvicorn.Config(
        app, host=host, port=port, log_level=log_level, lifespan="on", access_log=False
    )
    return _QuietServer(config)

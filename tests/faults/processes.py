"""A simulated engine in its own process, so a test can SIGKILL it and start it again."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import httpx

from tests.fixtures.gateway import ENGINE_MODEL
from tests.fixtures.servers import free_port

START_TIMEOUT_S = 15.0


class EngineProcess:
    """`python -m gateway.sim engine --port N`; `kill` is SIGKILL, `start` serves it again."""

    def __init__(self, **params: Any) -> None:
        self.port = free_port()
        self.params = {"model": ENGINE_MODEL} | params
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        command = [sys.executable, "-m", "gateway.sim", "engine", "--port", str(self.port)]
        self.process = subprocess.Popen(
            [*command, "--params-json", json.dumps(self.params)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the simulated engine on {self.url} did not start")
            time.sleep(0.05)

    def _answers(self) -> bool:
        try:
            return httpx.get(self.url + "/health", timeout=0.5).status_code == 200
        except httpx.HTTPError:
            return False

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(5)

    def __enter__(self) -> EngineProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill()

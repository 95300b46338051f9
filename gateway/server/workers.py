"""`serve --workers N`: N gateway processes accepting on one port, each a full replica.

Each worker listens on a socket of its own, bound to the same address with SO_REUSEPORT: the
kernel (Linux) hands every new connection to one of the listening workers by a hash of its
addresses and ports, so one client's pool of keep-alive connections spreads over the workers.
(One socket shared by every worker let whichever woke first accept a whole burst of connects,
and keep them for their life.) A worker listens only once its app has started, and stops
listening when it drains, so no connection queues at a worker that cannot serve it. The
supervisor holds the port with a socket bound the same way that never listens: `--port 0`
resolves once, a restarted worker binds the same port, and connects are refused once every
worker has stopped. Workers share state through Redis exactly as replicas on several hosts do
(leases, estimates, tenant limits, budgets, the breaker): GATEWAY_REDIS_URL when set, else a
private Valkey server the supervisor owns (gateway/server/embedded_redis.py).

Signals: SIGTERM (and SIGINT) drain: every worker stops accepting and finishes what is in
flight within `server.drain_timeout_s`, then the supervisor stops the private server. SIGHUP is
forwarded: every worker reloads the config file. A worker that exits unasked is started again
(after a backoff when it keeps failing); the leases it held expire with their TTL.

/metrics: prometheus_client's multiprocess mode (PROMETHEUS_MULTIPROC_DIR, a private directory
per supervisor). A scrape reaches one worker, whichever accepts it, so each worker answers for
all: counters and histograms summed over the workers (a dead worker's counts kept, so totals
never go backwards), in-flight gauges summed over live workers, the other gauges (engine and
endpoint state, which every worker observes alike) the most recent value. Per-worker labelled
series would need Prometheus to scrape each worker on its own port.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from gateway.config.settings import GatewayConfig, Settings
from gateway.server.embedded_redis import EmbeddedRedis
from gateway.telemetry.metrics import log

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
POLL_S = 0.1
BACKOFF_S = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0)  # by crashes in a row; a minute's uptime resets it
STABLE_S = 60.0
KILL_GRACE_S = 5.0  # past the drain timeout, before a worker still running is killed


def reuseport_socket(host: str, port: int) -> socket.socket:
    """Bound, not yet listening, with SO_REUSEPORT: the supervisor's holds the port, each
    worker's joins the kernel's balancing when uvicorn listens on it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


@dataclass
class Worker:
    index: int
    process: subprocess.Popen[bytes]
    started_s: float
    crashes: int = 0  # exits in a row, each within STABLE_S of its start
    restart_at_s: float | None = None  # exited: started again then


@dataclass
class Supervisor:
    config: GatewayConfig
    config_path: Path
    settings: Settings
    count: int
    host: str
    port: int
    workers: list[Worker] = field(default_factory=list)
    stopping: bool = False
    env: dict[str, str] = field(default_factory=dict)

    def run(self) -> int:
        """Serve until SIGTERM or SIGINT, then drain; the exit status."""
        with ExitStack() as stack:
            held = reuseport_socket(self.host, self.port)
            stack.callback(held.close)
            self.port = held.getsockname()[1]  # `--port 0`: the port every worker binds
            self.env = self._environment(stack)
            self._trap_signals()
            self.workers = [self._spawn(i) for i in range(self.count)]
            where = f"{self.host}:{self.port}"
            log.warning("supervisor %d: %d workers on %s", os.getpid(), self.count, where)
            while not self.stopping:
                self._replace_exited()
                time.sleep(POLL_S)
            self._drain()
        return 0

    def _environment(self, stack: ExitStack) -> dict[str, str]:
        env = dict(os.environ) | {
            "GATEWAY_CONFIG": str(self.config_path.resolve()),
            "GATEWAY_HOST": self.host,
            "GATEWAY_PORT": str(self.port),
        }
        if not self.settings.redis_url:
            server = stack.enter_context(EmbeddedRedis())
            env["GATEWAY_REDIS_URL"] = server.url
            log.warning("no GATEWAY_REDIS_URL: workers share a private Valkey at %s", server.url)
        metrics_dir = tempfile.mkdtemp(prefix="sg-metrics-")
        stack.callback(shutil.rmtree, metrics_dir, True)
        env[MULTIPROC_ENV] = metrics_dir
        return env

    def _trap_signals(self) -> None:
        def stop(signum: int, frame: FrameType | None) -> None:
            self.stopping = True

        def reload(signum: int, frame: FrameType | None) -> None:
            for worker in self.workers:
                if worker.process.poll() is None:
                    worker.process.send_signal(signal.SIGHUP)

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGHUP, reload)

    def _spawn(self, index: int, crashes: int = 0) -> Worker:
        env = self.env | {"GATEWAY_WORKER_INDEX": str(index)}
        command = [sys.executable, "-m", "gateway.server.workers"]  # a fresh interpreter each
        process = subprocess.Popen(command, env=env)
        return Worker(index, process, time.monotonic(), crashes)

    def _replace_exited(self) -> None:
        now = time.monotonic()
        for i, worker in enumerate(self.workers):
            if worker.restart_at_s is not None:
                if now >= worker.restart_at_s:
                    self.workers[i] = self._spawn(worker.index, worker.crashes)
                continue
            status = worker.process.poll()
            if status is None:
                continue
            _forget_metrics(self.env[MULTIPROC_ENV], worker.process.pid)
            worker.crashes = 0 if now - worker.started_s > STABLE_S else worker.crashes + 1
            delay = BACKOFF_S[min(worker.crashes, len(BACKOFF_S) - 1)]
            worker.restart_at_s = now + delay
            log.error(
                "worker %d (pid %d) exited with status %s; starting it again in %.1fs",
                worker.index,
                worker.process.pid,
                status,
                delay,
            )

    def _drain(self) -> None:
        """Every worker stops accepting and finishes its requests; then they are gone."""
        log.warning("supervisor: draining %d workers", len(self.workers))
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.config.server.drain_timeout_s + KILL_GRACE_S
        for worker in self.workers:
            try:
                worker.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("worker %d still running after the drain: killed", worker.index)
                worker.process.kill()
                worker.process.wait()


def _forget_metrics(metrics_dir: str, pid: int) -> None:
    """A dead worker's live gauges leave the exposition; its counters stay in the totals."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, metrics_dir)  # type: ignore[no-untyped-call]


def serve_worker() -> None:
    """One worker: the gateway app under uvicorn on its own socket, which uvicorn listens on once
    the app has started; uvicorn's own SIGTERM handling is the drain, the app's SIGHUP handler
    the reload."""
    import uvicorn

    from gateway.config.settings import load_config
    from gateway.server.app import create_app
    from gateway.server.http_protocol import bounded_protocol

    # A reload asked while starting would kill the worker (SIGHUP's default); it reads the file
    # as it starts anyway, and the app's own handler takes over once it runs.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    settings = Settings()
    assert settings.config is not None  # the supervisor passes GATEWAY_CONFIG on
    config = load_config(settings.config)
    sock = reuseport_socket(settings.host, settings.port)
    app = create_app(config, settings, config_path=Path(settings.config))
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_level=settings.log_level,
            lifespan="on",
            timeout_graceful_shutdown=config.server.drain_timeout_s,
            http=bounded_protocol(config.server),
        )
    )
    server.run(sockets=[sock])


if __name__ == "__main__":
    serve_worker()

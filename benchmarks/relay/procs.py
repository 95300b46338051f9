"""Processes under test: started pinned to a core, waited for, measured from /proc, stopped.

CPU time is utime + stime from /proc/<pid>/stat summed over the process and its descendants
(LiteLLM may fork helpers), so a figure per 1,000 requests counts everything the system burnt.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.relay.load import get_status

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
STOP_TIMEOUT_S = 5.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for tid in tasks:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/children").read_text()
        except OSError:
            continue
        found += [int(child) for child in text.split()]
    return found


def tree(pid: int) -> list[int]:
    pids, queue = [], [pid]
    while queue:
        current = queue.pop()
        pids.append(current)
        queue += _children(current)
    return pids


def _cpu_s(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime


def cpu_s(pid: int) -> float:
    return sum(_cpu_s(p) for p in tree(pid))


def rss_mb(pid: int) -> float:
    total_kb = 0
    for p in tree(pid):
        try:
            lines = Path(f"/proc/{p}/status").read_text().splitlines()
        except OSError:
            continue
        total_kb += sum(int(line.split()[1]) for line in lines if line.startswith("VmRSS:"))
    return total_kb / 1024


def self_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


@dataclass
class Running:
    """A started server: its name, port and process, and its log file."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid

    def cpu_s(self) -> float:
        return cpu_s(self.pid)

    def rss_mb(self) -> float:
        return rss_mb(self.pid)

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT_S)


def start(
    name: str,
    argv: list[str],
    port: int,
    core: int | str,
    logs: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> Running:
    """Start `argv` pinned to `core`, its output to a log file (read it when a start fails)."""
    log = (logs / f"{name}.log").resolve()
    with log.open("wb") as out:
        process = subprocess.Popen(
            ["taskset", "-c", str(core), *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,  # a Ctrl-C on the harness reaches it only through stop()
        )
    return Running(name, port, process, log)


async def wait_ready(server: Running, path: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.name} exited at start; see {server.log}")
        if await get_status(server.port, path) == 200:
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{server.name} not ready within {timeout_s:.0f} s; see {server.log}")

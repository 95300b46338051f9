"""Headers: an upstream's hop-by-hop headers, cookies and internals are not relayed; request
heads and upstream response heads are bounded; a malformed x-request-id never travels on."""

from __future__ import annotations

import contextlib
import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.faults.upstreams import OK_BODY, Answer, ScriptedUpstream, Seen, serving
from tests.fixtures.gateway import (
    TENANT_KEY,
    chat_body,
    engine,
    eventually,
    fleet_gateway,
    gateway_for,
    one_engine_config,
    one_engine_gateway,
)
from tests.fixtures.processes import GatewayProcess
from tests.fixtures.servers import UvicornThread
from tests.fuzz.openai_errors import openai_error

pytestmark = pytest.mark.integration
AUTH = {"authorization": f"Bearer {TENANT_KEY}"}
UPSTREAM_HEADERS = [
    ("connection", "keep-alive, x-hop-secret"),
    ("keep-alive", "timeout=99"),
    ("x-hop-secret", "hop-value-4a4a"),
    ("proxy-authenticate", "Basic realm=upstream-realm-8e8e"),
    ("upgrade", "h2c"),
    ("trailer", "x-upstream-trailer"),
    ("set-cookie", "upstream_session=cookie-value-5b5b; Path=/"),
    ("set-cookie", "second=cookie-value-6c6c"),
    ("x-upstream-internal", "internal-7d7d"),
    ("server", "upstream-server-9f9f"),
]
SSE = b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\ndata: [DONE]\n\n'


def noisy(seen: Seen) -> Answer:
    if b'"stream": true' in seen.body:
        return Answer(200, [("content-type", "text/event-stream"), *UPSTREAM_HEADERS], SSE)
    if b'"max_tokens": 3' in seen.body:  # the client-fault path: a 400 relayed as sent
        error = {"message": "bad", "type": "invalid_request_error", "param": None, "code": None}
        return Answer(400, UPSTREAM_HEADERS, json.dumps({"error": error}).encode())
    return Answer(200, UPSTREAM_HEADERS)


@pytest.mark.parametrize("extra", [{}, {"stream": True}, {"max_tokens": 3}])
def test_hop_by_hop_headers_and_cookies_from_the_upstream_are_not_relayed(
    extra: dict[str, object],
) -> None:
    upstream = ScriptedUpstream(noisy)
    with serving(upstream) as url, gateway_for(url) as gateway:
        body = chat_body(max_tokens=2) | extra
        response = httpx.post(gateway.base_url + "/v1/chat/completions", json=body, headers=AUTH)
    assert response.status_code in (200, 400)
    relayed = " ".join(f"{k}: {v}" for k, v in response.headers.multi_items()).lower()
    for name, value in UPSTREAM_HEADERS:
        assert value.lower().split(",")[-1].strip() not in relayed, name
    assert "set-cookie" not in response.headers


def test_an_oversized_request_head_is_refused_with_a_431(tmp_path: Path) -> None:
    with (
        one_engine_config(server={"max_header_bytes": 4096}) as data,
        GatewayProcess(data, tmp_path) as gateway,
    ):
        url = gateway.base_url + "/v1/chat/completions"
        body = chat_body(max_tokens=2)
        small = httpx.post(url, json=body, headers=AUTH | {"x-pad": "p" * 2000})
        large = httpx.post(url, json=body, headers=AUTH | {"x-pad": "p" * 8000})
        many = httpx.post(url, json=body, headers=AUTH | {f"x-h{i}": "v" for i in range(600)})
        endless = endless_header(gateway.port, 5_000_000)
        after = httpx.post(url, json=body, headers=AUTH)
    assert small.status_code == 200 and after.status_code == 200
    for response in (large, many):
        assert response.status_code == 431
        assert openai_error(431 - 31, response.headers["content-type"], response.json()) is None
    assert endless.startswith(b"HTTP/1.1 431")


def endless_header(port: int, size: int) -> bytes:
    """Send one header of `size` bytes in pieces; the gateway must refuse before the end."""
    head = b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\nx-endless: "
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head)
        try:
            for _ in range(size // 65536):
                sock.sendall(b"e" * 65536)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused part way: what we want; the answer is already waiting
        return sock.recv(65536)


def huge_headers(seen: Seen) -> Answer:
    return Answer(200, [("x-huge", "h" * 100_000)])


@contextlib.contextmanager
def huge_then_good(**sections: Any) -> Iterator[UvicornThread]:
    """A gateway over an upstream with oversized headers ("a-huge") and a healthy engine
    ("b-good"): what both tests below set up, one for requests and one for health probes."""
    with (
        serving(ScriptedUpstream(huge_headers)) as bad,
        fleet_gateway({"a-huge": bad, "b-good": engine()}, **sections) as (gateway, _),
    ):
        yield gateway


def test_an_upstream_with_oversized_headers_fails_the_attempt_not_the_gateway() -> None:
    with huge_then_good() as gateway:
        url = gateway.base_url + "/v1/chat/completions"
        responses = [httpx.post(url, json=chat_body(max_tokens=2), headers=AUTH) for _ in range(4)]
    assert {r.status_code for r in responses} == {200}
    assert {r.headers["x-slo-gateway-endpoint"] for r in responses} == {"b-good"}
    assert all("x-huge" not in r.headers for r in responses)


def test_health_probes_survive_an_endpoint_with_oversized_headers() -> None:
    state = {"health_interval_s": 0.1, "breaker_failures": 2, "breaker_cooldown_s": 30.0}
    with huge_then_good(state=state | {"refresh_s": 0.05}) as gateway:

        def phases() -> dict[str, str]:
            readyz = httpx.get(gateway.base_url + "/readyz").json()
            return dict(readyz["endpoints"])

        assert eventually(lambda: phases()["a-huge"] == "breaker_open", 5), phases()
        assert phases()["b-good"] == "available"


@pytest.mark.parametrize("request_id", ["has space", "x" * 200, "semi;colon", "ünïcode"])
def test_a_malformed_request_id_is_replaced_before_it_goes_upstream(request_id: str) -> None:
    upstream = ScriptedUpstream()
    with serving(upstream) as url, gateway_for(url) as gateway:
        headers = AUTH | {"x-request-id": request_id}
        response = httpx.post(
            gateway.base_url + "/v1/chat/completions",
            json=chat_body(max_tokens=2),
            headers=[(k.encode(), v.encode()) for k, v in headers.items()],
        )
    [seen] = upstream.completions()
    sent = dict((k.lower(), v) for k, v in seen.headers)["x-request-id"]
    assert sent != request_id and re.fullmatch(r"[0-9a-f]{16,64}", sent)  # one the gateway made
    assert response.headers["x-request-id"] == sent
    assert response.json()["object"] == OK_BODY["object"]


SLASHED = [
    ("POST", "/v1/chat/completions/"),
    ("POST", "/v1/embeddings/"),
    ("GET", "/v1/models/"),
    ("GET", "/dashboard/"),
    ("GET", "/metrics/"),
]


def test_a_trailing_slash_is_a_404_never_a_redirect_to_the_clients_host() -> None:
    with one_engine_gateway() as gateway:
        responses = [
            httpx.request(
                method,
                gateway.base_url + path,
                json=chat_body(max_tokens=2) if method == "POST" else None,
                headers=AUTH | {"host": "evil.example"},
            )
            for method, path in SLASHED
        ]
    for response in responses:
        assert response.status_code == 404 and "location" not in response.headers
        assert openai_error(404, response.headers["content-type"], response.json()) is None
        assert "evil.example" not in response.text

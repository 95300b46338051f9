"""What crosses to an upstream: only the gateway's own headers and the provider's key, never the
client's credentials or headers; only configured URLs, never one a client supplied; and a
redirect from an upstream is not followed (by requests, health probes or metrics scrapes)."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from tests.faults.upstreams import Answer, ScriptedUpstream, Seen, serving
from tests.fixtures.gateway import PROVIDER_KEY, TENANT_KEY, chat_body, gateway_for

pytestmark = pytest.mark.integration
CLIENT_HEADERS = {
    "authorization": f"Bearer {TENANT_KEY}",
    "cookie": "session=client-cookie-1f2e",
    "x-api-key": "client-x-api-key-9d8c",
    "openai-organization": "org-client-5b6a",
    "proxy-authorization": "Basic client-proxy-3c4d",
    "x-forwarded-for": "203.0.113.9",
    "x-custom-client": "client-custom-7e8f",
}
FORWARDED = {
    "host", "content-type", "content-length", "accept-encoding", "accept", "user-agent",
    "x-request-id", "authorization", "traceparent", "tracestate", "connection",
}  # fmt: skip


def header_names(seen: Seen) -> set[str]:
    return {name.lower() for name, _ in seen.headers}


@pytest.mark.parametrize("kind", ["openai", "vllm"])
def test_the_clients_authorization_and_headers_never_reach_the_upstream(kind: str) -> None:
    upstream = ScriptedUpstream()
    with serving(upstream) as url, gateway_for(url, kind=kind) as gw:
        response = httpx.post(
            gw.base_url + "/v1/chat/completions",
            json=chat_body(max_tokens=2),
            headers=CLIENT_HEADERS,
        )
    assert response.status_code == 200
    [seen] = upstream.completions()
    sent = " ".join(f"{k}: {v}" for k, v in seen.headers) + seen.body.decode()
    for value in CLIENT_HEADERS.values():
        assert value.split()[-1] not in sent
    assert header_names(seen) <= FORWARDED, header_names(seen) - FORWARDED
    authorization = dict((k.lower(), v) for k, v in seen.headers).get("authorization")
    assert authorization == (f"Bearer {PROVIDER_KEY}" if kind == "openai" else None)


def test_a_client_supplied_url_is_never_fetched() -> None:
    canary, real = ScriptedUpstream(), ScriptedUpstream()
    with serving(canary) as canary_url, serving(real) as real_url:
        target = canary_url + "/v1"
        body = chat_body(max_tokens=2) | {
            "base_url": target,
            "api_base": target,
            "url": target,
            "endpoint": target,
            "callback_url": target,
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": target}}]}
            ],
        }
        headers = {
            "authorization": f"Bearer {TENANT_KEY}",
            "x-forwarded-host": canary_url.removeprefix("http://"),
            "x-original-url": target,
            "forwarded": f"host={canary_url.removeprefix('http://')}",
        }
        with gateway_for(real_url) as gateway:
            url = gateway.base_url + "/v1/chat/completions"
            ok = httpx.post(url, json=body, headers=headers)
            as_model = httpx.post(url, json=body | {"model": target}, headers=headers)
            absolute = absolute_form(gateway.base_url, canary_url, chat_body(max_tokens=2))
            time.sleep(0.3)  # let any background work that would follow a URL happen
    assert ok.status_code == 200 and as_model.status_code == 404
    assert absolute.startswith(b"HTTP/1.1 200")
    assert canary.seen == []
    assert len(real.completions()) == 2


def absolute_form(base_url: str, other_url: str, body: dict[str, object]) -> bytes:
    """A request whose target is another server's absolute URL (proxy style) and Host too."""
    raw = json.dumps(body).encode()
    other_host = other_url.removeprefix("http://")
    head = (
        f"POST {other_url}/v1/chat/completions HTTP/1.1\r\nhost: {other_host}\r\n"
        f"authorization: Bearer {TENANT_KEY}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(raw)}\r\nconnection: close\r\n\r\n"
    ).encode()
    port = int(base_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head + raw)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


@pytest.mark.parametrize(
    ("kind", "probed"), [("vllm", {"/health", "/metrics"}), ("openai", {"/v1/models"})]
)
def test_upstream_redirects_are_not_followed(kind: str, probed: set[str]) -> None:
    canary = ScriptedUpstream()
    with serving(canary) as canary_url:

        def redirect(seen: Seen) -> Answer:
            return Answer(307, [("location", canary_url + seen.path)], b"")

        redirecting = ScriptedUpstream(redirect)
        with serving(redirecting) as url:
            state = {"health_interval_s": 0.1, "scrape_interval_s": 0.1}
            with gateway_for(url, kind=kind, state=state) as gateway:
                chat = gateway.base_url + "/v1/chat/completions"
                headers = {"authorization": f"Bearer {TENANT_KEY}"}
                responses = [httpx.post(chat, json=chat_body(max_tokens=2), headers=headers)]
                time.sleep(0.5)  # several health probes and metrics scrapes
    paths = {s.path for s in redirecting.seen}
    assert {"/v1/chat/completions", *probed} <= paths
    assert canary.seen == [], "the gateway followed a redirect"
    assert responses[0].status_code == 502
    assert "location" not in responses[0].headers

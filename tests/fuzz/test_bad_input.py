"""Hand-written bad input: every case gets a 4xx in OpenAI's error shape, never a 5xx, and the
gateway keeps serving afterwards."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator

import httpx
import pytest

from tests.faults.shared_state import redis_gateway
from tests.fixtures.gateway import (
    OTHER_TENANT_KEY,
    PUBLIC_MODEL,
    TENANT_KEY,
    chat_body,
    one_engine_config,
    one_engine_gateway,
    tenants_with,
)
from tests.fuzz.openai_errors import openai_error

pytestmark = pytest.mark.integration
AUTH = {"authorization": f"Bearer {TENANT_KEY}", "content-type": "application/json"}
MAX_BODY_BYTES = 64 * 1024
CHAT = "/v1/chat/completions"
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def gateway() -> Iterator[str]:
    with one_engine_gateway(server={"max_body_bytes": MAX_BODY_BYTES}) as server:
        yield server.base_url


def as_json(raw: object) -> bytes:
    return json.dumps(raw).encode()


CASES: dict[str, tuple[str, bytes, int, str | None]] = {
    # name: (path, raw body, expected status, expected error.param)
    "malformed json": (CHAT, b'{"model": "llama-3-8b", "messages": [', 400, None),
    "empty body": (CHAT, b"", 400, None),
    "json array": (CHAT, b"[1, 2, 3]", 400, None),
    "json string": (CHAT, b'"hello"', 400, None),
    "invalid utf-8": (CHAT, b'{"model": "\xff\xfe", "messages": []}', 400, None),
    "nesting too deep": (
        CHAT,
        b'{"model": "m", "x": ' + b"[" * 20_000 + b"]" * 20_000 + b"}",
        400,
        None,
    ),
    "number too long": (CHAT, b'{"model": "m", "max_tokens": ' + b"9" * 5000 + b"}", 400, None),
    "model missing": (CHAT, as_json({"messages": MESSAGES}), 400, "model"),
    "model not a string": (CHAT, as_json({"model": 7, "messages": MESSAGES}), 400, "model"),
    "model empty": (CHAT, as_json({"model": "", "messages": MESSAGES}), 400, "model"),
    "unknown model": (CHAT, as_json({"model": "gpt-9", "messages": MESSAGES}), 404, "model"),
    "messages missing": (CHAT, as_json({"model": PUBLIC_MODEL}), 400, "messages"),
    "messages empty": (CHAT, as_json({"model": PUBLIC_MODEL, "messages": []}), 400, "messages"),
    "messages a string": (
        CHAT,
        as_json({"model": PUBLIC_MODEL, "messages": "hi"}),
        400,
        "messages",
    ),
    "message without role": (
        CHAT,
        as_json(chat_body() | {"messages": [{"content": "x"}]}),
        400,
        "messages",
    ),
    "message not an object": (CHAT, as_json(chat_body() | {"messages": [1]}), 400, "messages"),
    "stream a string": (CHAT, as_json(chat_body(stream="yes")), 400, "stream"),
    "max_tokens a string": (CHAT, as_json(chat_body(max_tokens="10")), 400, "max_tokens"),
    "max_tokens a bool": (CHAT, as_json(chat_body(max_tokens=True)), 400, "max_tokens"),
    "max_tokens negative": (CHAT, as_json(chat_body(max_tokens=-1)), 400, "max_tokens"),
    "max_tokens zero": (CHAT, as_json(chat_body(max_tokens=0)), 400, "max_tokens"),
    "max_tokens a float": (CHAT, as_json(chat_body(max_tokens=1.5)), 400, "max_tokens"),
    "max_completion_tokens": (
        CHAT,
        as_json(chat_body(max_completion_tokens=[])),
        400,
        "max_completion_tokens",
    ),
    "prompt missing": ("/v1/completions", as_json({"model": PUBLIC_MODEL}), 400, "prompt"),
    "prompt a number": (
        "/v1/completions",
        as_json({"model": PUBLIC_MODEL, "prompt": 5}),
        400,
        "prompt",
    ),
    "input missing": ("/v1/embeddings", as_json({"model": PUBLIC_MODEL}), 400, "input"),
    "body over the limit": (CHAT, as_json(chat_body("x" * MAX_BODY_BYTES)), 413, None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_body_is_a_4xx_in_openai_shape(gateway: str, name: str) -> None:
    path, raw, status, param = CASES[name]
    response = httpx.post(gateway + path, content=raw, headers=AUTH, timeout=10)
    assert response.status_code == status, response.text[:300]
    assert openai_error(status, response.headers["content-type"], response.json()) is None
    if param is not None:
        assert response.json()["error"]["param"] == param


def test_body_over_the_limit_without_content_length_is_413(gateway: str) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"model": "llama-3-8b", "messages": [{"role": "user", "content": "'
        for _ in range(20):
            yield b"x" * 8192
        yield b'"}]}'

    response = httpx.post(gateway + CHAT, content=chunks(), headers=AUTH, timeout=10)
    assert response.status_code == 413
    assert openai_error(413, response.headers["content-type"], response.json()) is None


@pytest.mark.parametrize("max_tokens", [10**6, 10**12, 10**30])
def test_huge_max_tokens_is_the_endpoints_400_at_once(gateway: str, max_tokens: int) -> None:
    body = chat_body(max_tokens=max_tokens, stream=True)
    response = httpx.post(gateway + CHAT, json=body, headers=AUTH, timeout=10)
    # The engine refuses it (context length); the gateway neither queues nor sheds it.
    assert response.status_code == 400, response.text[:300]
    assert openai_error(400, response.headers["content-type"], response.json()) is None
    assert response.elapsed.total_seconds() < 1.0


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (CHAT, chat_body(max_tokens=2)),
        ("/v1/responses", {"model": PUBLIC_MODEL, "input": "hi", "max_output_tokens": 2}),
        ("/v1/completions", {"model": PUBLIC_MODEL, "prompt": "hi", "max_tokens": 2}),
    ],
)
def test_an_integer_beyond_64_bits_in_hashed_fields_is_served(
    gateway: str, path: str, body: dict[str, object]
) -> None:
    """The prompt's prefix hash reads the tools and non-text parts as JSON; an integer orjson
    cannot write (valid JSON all the same) must not fail the request."""
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"max": 10**20}}}]
    response = httpx.post(gateway + path, json=body | {"tools": tools}, headers=AUTH, timeout=10)
    assert response.status_code == 200, response.text[:300]


def test_nesting_at_the_recursion_limit_never_fails_the_gateway(gateway: str) -> None:
    limit = sys.getrecursionlimit()
    statuses = set()
    for depth in range(limit - 60, limit + 10, 5):
        raw = (
            as_json(chat_body(max_tokens=2))[:-1] + b', "x": ' + b"[" * depth + b"]" * depth + b"}"
        )
        statuses.add(httpx.post(gateway + CHAT, content=raw, headers=AUTH, timeout=10).status_code)
    assert statuses <= {200, 400}


@pytest.mark.parametrize(
    ("key", "slo_class", "status"),
    [(OTHER_TENANT_KEY, "interactive", 403), (TENANT_KEY, "no-such-class", 403)],
)
def test_slo_class_the_tenant_may_not_use_is_403(
    gateway: str, key: str, slo_class: str, status: int
) -> None:
    headers = {"authorization": f"Bearer {key}", "x-slo-class": slo_class}
    response = httpx.post(gateway + CHAT, json=chat_body(max_tokens=2), headers=headers)
    assert response.status_code == status
    assert openai_error(status, response.headers["content-type"], response.json()) is None
    assert response.json()["error"]["type"] == "permission_error"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", CHAT, 405), ("POST", "/v1/nope", 404), ("DELETE", "/v1/models", 405)],
)
def test_wrong_route_or_method_is_an_openai_error(
    gateway: str, method: str, path: str, status: int
) -> None:
    response = httpx.request(method, gateway + path, headers=AUTH)
    assert response.status_code == status
    assert openai_error(status, response.headers["content-type"], response.json()) is None


def raw_request(base_url: str, head: bytes, body: bytes) -> bytes:
    """Send bytes the HTTP client libraries refuse to produce; returns the raw answer."""
    port = int(base_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head + b"content-length: %d\r\n\r\n" % len(body) + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


@pytest.mark.parametrize(
    "header",
    [
        b"x-slo-class: batch\rx-injected: 1\r\n",  # a bare CR
        b"x-slo-class: batch\nx-injected: 1\r\n",  # a bare LF
        b"x-slo-class: batch\r\n folded\r\n",  # obsolete line folding
        b"x-slo-class: ba\x00tch\r\n",  # NUL
    ],
)
def test_header_with_cr_lf_or_nul_is_refused_as_a_bad_request(gateway: str, header: bytes) -> None:
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\nconnection: close\r\n"
        b"authorization: Bearer " + TENANT_KEY.encode() + b"\r\n" + header
    )
    answer = raw_request(gateway, head, as_json(chat_body(max_tokens=2)))
    status = int(answer.split(b" ", 2)[1])
    # The HTTP parser refuses it before the app sees it (its body is uvicorn's plain text).
    assert status == 400, answer[:200]
    ok = httpx.post(gateway + CHAT, json=chat_body(max_tokens=2), headers=AUTH)
    assert ok.status_code == 200


@pytest.mark.redis
def test_huge_max_tokens_against_a_token_limit_is_a_400_and_redis_stays_up(
    redis_url: str, key_prefix: str
) -> None:
    limits = {"tokens_per_min": 100_000, "max_concurrent": 5}
    with (
        one_engine_config(tenants=tenants_with(acme={"limits": limits})) as data,
        redis_gateway(data, redis_url, key_prefix) as gateway,
    ):
        huge = [
            httpx.post(gateway + CHAT, json=chat_body(max_tokens=n), headers=AUTH)
            for n in (10**12, 10**30, 2**63)
        ]
        readyz = httpx.get(gateway + "/readyz").json()
        ok = httpx.post(gateway + CHAT, json=chat_body(max_tokens=2), headers=AUTH)
    # Each reservation is capped at the limit (the atomic admission's arithmetic stays in
    # range), is admitted into the window, and the request is then refused before it is sent:
    # it does not fit the engine's context window (max_model_len, from its /v1/models). Its
    # reservation goes back, so the next is admitted and refused the same way.
    assert [r.status_code for r in huge] == [400, 400, 400]
    assert {r.json()["error"]["code"] for r in huge} == {"context_length_exceeded"}
    assert readyz["shared_state"] == "up" and ok.status_code == 200

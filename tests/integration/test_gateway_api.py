"""The OpenAI surface through the gateway, driven by the official openai SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fixtures.gateway import (
    ENGINE_MODEL,
    PROVIDER_KEY,
    PUBLIC_MODEL,
    TENANT_KEY,
    chat_body,
    engine,
    gateway_for,
    gateway_over,
    sim_stats,
)
from tests.fixtures.servers import UvicornThread

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[str, str]]:
    """One simulated engine behind one gateway: (gateway URL, engine URL)."""
    with gateway_over(engine(), "vllm-1") as urls:
        yield urls


@pytest.fixture
def client(stack: tuple[str, str]) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack[0] + "/v1", api_key=TENANT_KEY, max_retries=0)


def test_non_stream_chat_returns_the_engines_answer(
    client: openai.OpenAI, stack: tuple[str, str]
) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=PUBLIC_MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=8
    )
    completion = raw.parse()
    assert completion.choices[0].message.content
    assert completion.usage is not None and completion.usage.completion_tokens == 8
    assert raw.headers["x-slo-gateway-endpoint"] == "vllm-1"
    assert raw.headers["x-request-id"]
    assert sim_stats(stack[1])["last_model"] == ENGINE_MODEL


def test_stream_first_event_carries_content_and_usage_passes_through(
    client: openai.OpenAI,
) -> None:
    stream = client.chat.completions.create(
        model=PUBLIC_MODEL,
        messages=[{"role": "user", "content": "Hi"}],
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.content  # no role-only chunk ahead of the first token
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 6


def test_completions_and_embeddings_and_models(client: openai.OpenAI) -> None:
    completion = client.completions.create(model=PUBLIC_MODEL, prompt="Once", max_tokens=4)
    assert completion.choices[0].text
    streamed = list(
        client.completions.create(model=PUBLIC_MODEL, prompt="Once", max_tokens=3, stream=True)
    )
    assert "".join(c.choices[0].text for c in streamed if c.choices)
    embedding = client.embeddings.create(model=PUBLIC_MODEL, input="hello")
    assert embedding.data and embedding.data[0].embedding
    assert [m.id for m in client.models.list()] == [PUBLIC_MODEL]


def test_sdk_raises_typed_errors(stack: tuple[str, str]) -> None:
    url = stack[0] + "/v1"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url, api_key="sk-wrong", max_retries=0).models.list()
    client = openai.OpenAI(base_url=url, api_key=TENANT_KEY, max_retries=0)
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(
            model="gpt-nope", messages=[{"role": "user", "content": "x"}]
        )
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model=PUBLIC_MODEL, messages=[])
    assert bad.value.param == "messages"
    with pytest.raises(openai.PermissionDeniedError):
        client.with_options(default_headers={"x-slo-class": "platinum"}).completions.create(
            model=PUBLIC_MODEL, prompt="x", max_tokens=1
        )


@pytest.mark.parametrize(
    ("headers", "content", "status", "code"),
    [
        ({}, b"{}", 401, "missing_api_key"),
        ({"authorization": "Bearer sk-nope"}, b"{}", 401, "invalid_api_key"),
        ({"authorization": f"Bearer {TENANT_KEY}"}, b"{not json", 400, "invalid_json"),
        ({"authorization": f"Bearer {TENANT_KEY}"}, b"[1, 2]", 400, "invalid_json"),
        ({"authorization": f"Bearer {TENANT_KEY}"}, b'{"messages": []}', 400, "invalid_value"),
        (
            {"authorization": f"Bearer {TENANT_KEY}"},
            json.dumps(chat_body(max_tokens=-3)).encode(),
            400,
            "invalid_value",
        ),
        (
            {"authorization": f"Bearer {TENANT_KEY}"},
            json.dumps(chat_body(model="unknown-model")).encode(),
            404,
            "model_not_found",
        ),
        (
            {"authorization": f"Bearer {TENANT_KEY}"},
            json.dumps(chat_body("x" * 5_000_000)).encode(),
            413,
            "request_too_large",
        ),
    ],
)
def test_errors_have_the_openai_shape(
    stack: tuple[str, str], headers: dict[str, str], content: bytes, status: int, code: str
) -> None:
    response = httpx.post(
        stack[0] + "/v1/chat/completions",
        headers=headers | {"content-type": "application/json"},
        content=content,
    )
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code and error["message"]


def test_unknown_route_is_an_openai_error(stack: tuple[str, str]) -> None:
    response = httpx.get(stack[0] + "/v1/nothing-here")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_health_ready_and_metrics(client: openai.OpenAI, stack: tuple[str, str]) -> None:
    client.chat.completions.create(model=PUBLIC_MODEL, messages=[{"role": "user", "content": "x"}])
    assert httpx.get(stack[0] + "/healthz").status_code == 200
    ready = httpx.get(stack[0] + "/readyz")
    assert ready.status_code == 200 and ready.json()["endpoints"] == {"vllm-1": "available"}
    text = httpx.get(stack[0] + "/metrics").text
    assert 'slo_gateway_requests_total{endpoint="vllm-1",model="llama-3-8b"' in text
    assert "slo_gateway_decision_seconds_count" in text


class Recorder:
    """An upstream that records what it received and answers a fixed completion."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    async def chat(self, request: Request) -> JSONResponse:
        self.bodies.append(await request.json())
        self.headers.append(dict(request.headers))
        return JSONResponse(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "upstream-name",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "ok"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            },
            headers={"set-cookie": "upstream=1", "x-ratelimit-remaining-requests": "9"},
        )


def test_body_passes_through_with_model_rewritten_and_secrets_kept_apart() -> None:
    recorder = Recorder()
    with UvicornThread(recorder.app) as upstream:
        renamed = {"models": {PUBLIC_MODEL: "upstream-name"}}
        with gateway_for(
            upstream.base_url, "hosted", kind="openai", endpoint_options=renamed
        ) as gateway:
            body = chat_body(temperature=0.25, logit_bias={"42": -100}, vendor_extension={"a": [1]})
            response = httpx.post(
                gateway.base_url + "/v1/chat/completions",
                json=body,
                headers={"authorization": f"Bearer {TENANT_KEY}", "x-request-id": "req-123"},
            )
    assert response.status_code == 200
    assert recorder.bodies == [body | {"model": "upstream-name"}]
    sent = recorder.headers[0]
    assert sent["authorization"] == f"Bearer {PROVIDER_KEY}"  # never the client's key
    assert sent["x-request-id"] == "req-123"
    assert response.headers["x-request-id"] == "req-123"
    assert "set-cookie" not in response.headers
    assert PROVIDER_KEY not in response.text + str(response.headers)

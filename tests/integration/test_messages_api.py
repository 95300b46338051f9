"""The Anthropic Messages API through the gateway, driven by the official anthropic SDK, over
simulated engines and providers (which speak Anthropic's events and errors)."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fixtures.gateway import (
    PROVIDER_KEY,
    PUBLIC_MODEL,
    TENANT_KEY,
    counter_sum,
    engine,
    fleet_gateway,
    gateway_for,
    one_engine_gateway,
    runtime_of,
    tenants_with,
)
from tests.fixtures.servers import UvicornThread

pytestmark = pytest.mark.integration
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def gateway_url() -> Iterator[str]:
    with one_engine_gateway(endpoint_id="e1") as gateway:
        yield gateway.base_url


def sdk(gateway_url: str, auth: str) -> anthropic.Anthropic:
    credential = {"api_key": TENANT_KEY} if auth == "api_key" else {"auth_token": TENANT_KEY}
    return anthropic.Anthropic(base_url=gateway_url, max_retries=0, **credential)  # type: ignore[arg-type]


@pytest.mark.parametrize("auth", ["api_key", "auth_token"])
def test_create_and_stream_with_either_key_header(gateway_url: str, auth: str) -> None:
    client = sdk(gateway_url, auth)
    raw = client.messages.with_raw_response.create(model=PUBLIC_MODEL, max_tokens=5, messages=HI)
    message = raw.parse()
    assert message.model == PUBLIC_MODEL and message.stop_reason == "max_tokens"
    assert message.content[0].text == "The quick brown fox jumps"  # type: ignore[union-attr]
    assert message.usage.input_tokens >= 1 and message.usage.output_tokens == 5
    assert raw.headers["request-id"] == raw.headers["x-request-id"]
    with client.messages.stream(model=PUBLIC_MODEL, max_tokens=4, messages=HI) as stream:
        text = list(stream.text_stream)
        final = stream.get_final_message()
    assert text == ["The", " quick", " brown", " fox"]
    assert final.usage.output_tokens == 4 and final.model == PUBLIC_MODEL


def test_count_tokens_goes_to_an_endpoint(gateway_url: str) -> None:
    counted = sdk(gateway_url, "api_key").messages.count_tokens(
        model=PUBLIC_MODEL, messages=[{"role": "user", "content": "Hello there, friend"}]
    )
    assert counted.input_tokens >= 4


def test_errors_have_anthropics_shape_and_a_request_id(gateway_url: str) -> None:
    with pytest.raises(anthropic.AuthenticationError) as denied:
        anthropic.Anthropic(
            base_url=gateway_url, api_key="sk-wrong", max_retries=0
        ).messages.create(model=PUBLIC_MODEL, max_tokens=5, messages=HI)
    assert denied.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
    assert denied.value.request_id
    client = sdk(gateway_url, "api_key")
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model=PUBLIC_MODEL, max_tokens=0, messages=HI)
    assert bad.value.body["type"] == "error"  # type: ignore[index]
    assert bad.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="claude-nope", max_tokens=5, messages=HI)


def test_models_in_anthropics_shape_with_paging_fields(gateway_url: str) -> None:
    client = sdk(gateway_url, "api_key")
    page = client.models.list()
    assert [model.id for model in page.data] == [PUBLIC_MODEL]
    assert client.models.retrieve(PUBLIC_MODEL).display_name == PUBLIC_MODEL
    raw = httpx.get(
        gateway_url + "/v1/models",
        headers={"x-api-key": TENANT_KEY, "anthropic-version": "2023-06-01"},
    ).json()
    assert raw["has_more"] is False and raw["first_id"] == raw["last_id"] == PUBLIC_MODEL


def test_a_529_before_the_first_token_fails_over() -> None:
    overloaded = engine(faults={"status_code": 529})
    with fleet_gateway({"overloaded": overloaded, "healthy": engine()}) as (gateway, _):
        client = sdk(gateway.base_url, "api_key")
        attempts = []
        for _ in range(2):  # round robin: one of them starts at the overloaded endpoint
            raw = client.messages.with_raw_response.create(
                model=PUBLIC_MODEL, max_tokens=3, messages=HI
            )
            assert raw.headers["x-slo-gateway-endpoint"] == "healthy"
            attempts.append(raw.headers["x-slo-gateway-attempts"])
            with client.messages.stream(model=PUBLIC_MODEL, max_tokens=3, messages=HI) as s:
                assert "".join(s.text_stream) == "The quick brown"
                attempts.append(s.response.headers["x-slo-gateway-attempts"])
    assert sorted(attempts) == ["1", "1", "2", "2"]


def test_a_mid_stream_error_event_raises() -> None:
    faults = {"drop_mid_stream": 1.0, "drop_after_tokens": 2}
    with one_engine_gateway(engine(faults=faults)) as gateway:
        received: list[str] = []
        client = sdk(gateway.base_url, "api_key")
        with (
            pytest.raises(anthropic.APIStatusError) as failed,
            client.messages.stream(model=PUBLIC_MODEL, max_tokens=8, messages=HI) as stream,
        ):
            received.extend(stream.text_stream)
    assert received == ["The", " quick"]
    assert failed.value.body["error"]["type"] == "api_error"  # type: ignore[index]


class Recorder:
    """An upstream that records what it received on /v1/messages."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        self.app = Starlette(routes=[Route("/v1/messages", self.messages, methods=["POST"])])

    async def messages(self, request: Request) -> JSONResponse:
        self.headers.append(dict(request.headers))
        body: dict[str, Any] = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-upstream",
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "output_tokens": 1},
        }
        return JSONResponse(body)


@pytest.mark.parametrize("key_header", ["authorization", "x-api-key"])
def test_version_and_beta_are_forwarded_and_the_key_replaced(key_header: str) -> None:
    recorder = Recorder()
    with UvicornThread(recorder.app) as upstream:
        options = {
            "api_key_header": key_header,
            "apis": ["messages"],
            "models": {PUBLIC_MODEL: "claude-upstream"},
        }
        with gateway_for(
            upstream.base_url, "hosted", kind="openai", endpoint_options=options
        ) as gateway:
            answer = httpx.post(
                gateway.base_url + "/v1/messages?beta=true",
                json={"model": PUBLIC_MODEL, "max_tokens": 5, "messages": HI},
                headers={"x-api-key": TENANT_KEY, "anthropic-beta": "tools-2024-05-16"},
            )
    assert answer.status_code == 200 and answer.json()["model"] == PUBLIC_MODEL
    sent = recorder.headers[0]
    assert sent["anthropic-version"] == "2023-06-01"  # the default: the client sent none
    assert sent["anthropic-beta"] == "tools-2024-05-16"
    if key_header == "x-api-key":
        assert sent["x-api-key"] == PROVIDER_KEY and "authorization" not in sent
    else:
        assert sent["authorization"] == f"Bearer {PROVIDER_KEY}" and "x-api-key" not in sent


def test_a_repeated_prompt_reads_the_cache(gateway_url: str) -> None:
    client = sdk(gateway_url, "api_key")
    messages = [{"role": "user", "content": "A long shared document. " * 40}]
    first = client.messages.create(model=PUBLIC_MODEL, max_tokens=2, messages=messages)  # type: ignore[arg-type]
    again = client.messages.create(model=PUBLIC_MODEL, max_tokens=2, messages=messages)  # type: ignore[arg-type]
    assert first.usage.cache_read_input_tokens == 0
    assert again.usage.cache_read_input_tokens and again.usage.cache_read_input_tokens > 100
    total = again.usage.input_tokens + again.usage.cache_read_input_tokens
    assert total == first.usage.input_tokens


def test_refusals_are_counted_as_refusals_like_chat() -> None:
    """A 503 (no endpoint) and a 429 (tenant limit) on Messages are `rejected` with their
    reason, as on chat: never `error` (the gateway-bug class) nor `client_error`."""
    limited = tenants_with(acme={"limits": {"requests_per_min": 2}})
    message = {"model": PUBLIC_MODEL, "max_tokens": 3, "messages": HI}
    with one_engine_gateway(tenants=limited) as gw:
        post = functools.partial(httpx.post, headers={"x-api-key": TENANT_KEY})
        runtime_of(gw).registry.cool_down("e", time.time() + 30, "test")
        unavailable = post(gw.base_url + "/v1/messages", json=message)
        post(gw.base_url + "/v1/messages", json=message)
        limited_answer = post(gw.base_url + "/v1/messages", json=message)
        metrics = httpx.get(gw.base_url + "/metrics").text
    assert (unavailable.status_code, limited_answer.status_code) == (503, 429)
    count = functools.partial(counter_sum, metrics, "slo_gateway_requests_total")
    assert count(outcome="rejected", reason="no_endpoint_available") == 2
    assert count(outcome="rejected", reason="tenant_rate_limited") == 1
    assert count(outcome="error") == count(outcome="client_error") == 0

"""Every text field of every API with text that is not ordinary: unpaired UTF-16 surrogates
(escaped, and UTF-8-encoded), NUL and the non-characters U+FFFE, U+FFFF and U+10FFFF, through
a gateway in front of a simulated engine. Never a 5xx, never the outcome `error`: a surrogate is
a 400 in the API's own shape naming the field, the rest is served."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.fixtures.gateway import (
    PUBLIC_MODEL,
    TENANT_KEY,
    counter_sum,
    engine,
    one_engine_gateway,
)
from tests.fuzz.anthropic_errors import anthropic_error
from tests.fuzz.openai_errors import openai_error
from tests.fuzz.test_openapi_fuzz import FAST_ENGINE

pytestmark = pytest.mark.integration
AUTH = {"authorization": f"Bearer {TENANT_KEY}", "content-type": "application/json"}
Body = Callable[[str], dict[str, Any]]
FUNCTION = {"name": "f", "description": "", "parameters": {}}
TOOL: dict[str, Any] = {"type": "function", "function": FUNCTION}
ANTHROPIC_TOOL = {"name": "f", "input_schema": {"type": "object"}}


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": PUBLIC_MODEL, "max_tokens": 2} | fields


def message(**fields: Any) -> dict[str, Any]:
    return {"model": PUBLIC_MODEL, "max_tokens": 2} | fields


def response(**fields: Any) -> dict[str, Any]:
    return {"model": PUBLIC_MODEL, "max_output_tokens": 2} | fields


# (path, the field as the gateway names it, the body with a text in that field)
FIELDS: list[tuple[str, str, Body]] = [
    ("/v1/chat/completions", "messages[0].content",
     lambda t: chat(messages=[{"role": "user", "content": t}])),
    ("/v1/chat/completions", "messages[0].content[0].text",
     lambda t: chat(messages=[{"role": "user", "content": [{"type": "text", "text": t}]}])),
    ("/v1/chat/completions", "messages[0].name",
     lambda t: chat(messages=[{"role": "user", "content": "hi", "name": t}])),
    ("/v1/chat/completions", "messages[1].tool_calls[0].function.arguments",
     lambda t: chat(messages=[
         {"role": "user", "content": "hi"},
         {"role": "assistant", "tool_calls": [
             {"id": "c", "type": "function", "function": {"name": "f", "arguments": t}}]},
         {"role": "tool", "tool_call_id": "c", "content": "ok"}])),
    ("/v1/chat/completions", "tools[0].function.description",
     lambda t: chat(messages=[{"role": "user", "content": "hi"}],
                    tools=[TOOL | {"function": FUNCTION | {"description": t}}])),
    ("/v1/chat/completions", "user",
     lambda t: chat(messages=[{"role": "user", "content": "hi"}], user=t)),
    ("/v1/completions", "prompt", lambda t: chat(prompt=t)),
    ("/v1/completions", "prompt[1]", lambda t: chat(prompt=["hi", t])),
    ("/v1/embeddings", "input", lambda t: {"model": PUBLIC_MODEL, "input": t}),
    ("/v1/embeddings", "input[0]", lambda t: {"model": PUBLIC_MODEL, "input": [t]}),
    ("/v1/responses", "input", lambda t: response(input=t)),
    ("/v1/responses", "input[0].content",
     lambda t: response(input=[{"role": "user", "content": t}])),
    ("/v1/responses", "input[0].content[0].text",
     lambda t: response(input=[{"role": "user",
                                "content": [{"type": "input_text", "text": t}]}])),
    ("/v1/responses", "instructions",
     lambda t: response(input="hi", instructions=t)),
    ("/v1/messages", "system", lambda t: message(system=t, messages=[{"role": "user",
                                                                        "content": "hi"}])),
    ("/v1/messages", "system[0].text",
     lambda t: message(system=[{"type": "text", "text": t}],
                       messages=[{"role": "user", "content": "hi"}])),
    ("/v1/messages", "messages[0].content",
     lambda t: message(messages=[{"role": "user", "content": t}])),
    ("/v1/messages", "messages[0].content[0].text",
     lambda t: message(messages=[{"role": "user", "content": [{"type": "text", "text": t}]}])),
    ("/v1/messages", "tools[0].description",
     lambda t: message(messages=[{"role": "user", "content": "hi"}],
                       tools=[ANTHROPIC_TOOL | {"description": t}])),
    ("/v1/messages/count_tokens", "system",
     lambda t: message(system=t, messages=[{"role": "user", "content": "hi"}])),
    ("/v1/messages/count_tokens", "messages[0].content",
     lambda t: message(messages=[{"role": "user", "content": t}])),
    ("/v1/messages/count_tokens", "messages[0].content[0].text",
     lambda t: message(messages=[{"role": "user", "content": [{"type": "text", "text": t}]}])),
]  # fmt: skip
SURROGATES = {
    "lone high": "\ud800",
    "lone low": "x\udfff",
    "pair reversed": "\udc00\ud800",
    "high before text": "a\udbffb",
}
SERVED = {"nul": "a\x00b", "U+FFFE": "\ufffe", "U+FFFF": "\uffff", "U+10FFFF": "\U0010ffff"}


@pytest.fixture(scope="module")
def gateway() -> Iterator[str]:
    with one_engine_gateway(engine(**FAST_ENGINE)) as server:
        yield server.base_url
        metrics = httpx.get(server.base_url + "/metrics").text
        errors = counter_sum(metrics, "slo_gateway_requests_total", outcome="error")
        assert errors == 0, "an odd text was counted as a gateway error"


def post(gateway: str, path: str, raw: bytes) -> httpx.Response:
    headers = AUTH | ({"x-api-key": TENANT_KEY} if path.startswith("/v1/messages") else {})
    return httpx.post(gateway + path, content=raw, headers=headers, timeout=10)


def error_shape(path: str, response: httpx.Response) -> str | None:
    shape = anthropic_error if path.startswith("/v1/messages") else openai_error
    return shape(response.status_code, response.headers["content-type"], response.json())


@pytest.mark.parametrize("text", list(SURROGATES.values()), ids=list(SURROGATES))
@pytest.mark.parametrize(("path", "field", "body"), FIELDS, ids=[f"{p} {f}" for p, f, _ in FIELDS])
def test_an_unpaired_surrogate_is_a_400_naming_the_field(
    gateway: str, path: str, field: str, body: Body, text: str
) -> None:
    escaped = json.dumps(body(text)).encode()  # ensure_ascii: "\ud800" as its JSON escape
    encoded = json.dumps(body(text), ensure_ascii=False).encode("utf-8", "surrogatepass")
    for raw in (escaped, encoded):
        response = post(gateway, path, raw)
        assert response.status_code == 400, response.text[:300]
        assert error_shape(path, response) is None
    assert field in post(gateway, path, escaped).json()["error"]["message"]


@pytest.mark.parametrize("text", list(SERVED.values()), ids=list(SERVED))
@pytest.mark.parametrize(("path", "field", "body"), FIELDS, ids=[f"{p} {f}" for p, f, _ in FIELDS])
def test_nul_and_non_characters_are_served(
    gateway: str, path: str, field: str, body: Body, text: str
) -> None:
    for ensure_ascii in (True, False):
        raw = json.dumps(body(text), ensure_ascii=ensure_ascii).encode()
        response = post(gateway, path, raw)
        assert response.status_code == 200, (field, response.text[:300])


def test_a_surrogate_pair_is_one_character_and_served(gateway: str) -> None:
    raw = json.dumps(chat(messages=[{"role": "user", "content": "\U0001f600"}])).encode()
    assert b"\\ud83d\\ude00" in raw
    assert post(gateway, "/v1/chat/completions", raw).status_code == 200


def test_a_key_with_a_surrogate_is_named_without_breaking_the_answer(gateway: str) -> None:
    body = json.dumps(chat(messages=[{"role": "user", "content": "hi"}], metadata={"K": "v"}))
    raw = body.replace('"K"', '"\\ud800k"').encode()
    response = post(gateway, "/v1/chat/completions", raw)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "metadata.\\ud800k"

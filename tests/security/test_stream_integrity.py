"""What an upstream's errors and broken streams look like to a client: configured secrets
redacted from error bodies and from streamed error events (even an event split across reads
inside the key), and a stream cut mid-line ends in the gateway's error event on a line of its
own, so that every SSE parser (here the official openai SDK's) raises it; the partial line is
dropped, never relayed, with whatever it held."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.faults.upstreams import ScriptedUpstream, echo_secrets, serving
from tests.fixtures.gateway import (
    ADMIN_KEY,
    PROVIDER_KEY,
    PUBLIC_MODEL,
    TENANT_KEY,
    chat_body,
    gateway_for,
)

pytestmark = pytest.mark.integration
SECRETS = (PROVIDER_KEY, TENANT_KEY, ADMIN_KEY)


@pytest.fixture(scope="module")
def gateway() -> Iterator[str]:
    upstream = ScriptedUpstream(echo_secrets)
    with serving(upstream) as url, gateway_for(url, kind="openai") as gw:
        yield gw.base_url


def client(gateway: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway + "/v1", api_key=TENANT_KEY, max_retries=0)


def say(mode: str) -> list[openai.types.chat.ChatCompletionMessageParam]:
    return [{"role": "user", "content": f"{mode} {TENANT_KEY} {ADMIN_KEY}"}]


def raw_stream(gateway: str, mode: str) -> str:
    body = chat_body(f"{mode} {TENANT_KEY} {ADMIN_KEY}", stream=True)
    auth = {"authorization": f"Bearer {TENANT_KEY}"}
    response = httpx.post(gateway + "/v1/chat/completions", json=body, headers=auth, timeout=10)
    assert response.status_code == 200
    return response.text


def events(text: str) -> list[dict[str, object]]:
    """Every event as a strict SSE parser dispatches it: at a blank line, JSON data."""
    assert text.endswith("\n\n"), "the stream ends mid-event"
    parsed = []
    for event in text.split("\n\n")[:-1]:
        assert event.startswith("data: ") and "\n" not in event, event
        parsed.append(json.loads(event.removeprefix("data: ")))
    return parsed


def test_secrets_echoed_into_an_error_body_are_redacted(gateway: str) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client(gateway).chat.completions.create(model=PUBLIC_MODEL, messages=say("echo-body"))
    text = refused.value.response.text
    assert [s for s in SECRETS if s in text] == [] and "[redacted]" in text


def test_a_key_echoed_into_a_streamed_error_event_split_inside_the_key_is_redacted(
    gateway: str,
) -> None:
    stream = client(gateway).chat.completions.create(
        model=PUBLIC_MODEL, messages=say("echo-stream"), stream=True
    )
    with pytest.raises(openai.APIError) as failed:
        for _ in stream:
            pass
    assert "key Bearer [redacted] exhausted" in failed.value.message
    assert [s for s in SECRETS if s in failed.value.message] == []
    text = raw_stream(gateway, "echo-stream")
    assert [s for s in SECRETS if s in text] == [] and "error" in events(text)[-1]


def test_a_stream_cut_mid_line_ends_with_an_error_event_every_parser_sees(gateway: str) -> None:
    stream = client(gateway).chat.completions.create(
        model=PUBLIC_MODEL, messages=say("cut-mid-line"), stream=True
    )
    received = []
    with pytest.raises(openai.APIError) as failed:
        for chunk in stream:
            received.append(chunk.choices[0].delta.content)
    assert received == ["abc"]  # the whole event before the cut, and nothing of the partial one
    assert isinstance(failed.value.body, dict)
    assert failed.value.body["code"] == "upstream_stream_interrupted"
    parsed = events(raw_stream(gateway, "cut-mid-line"))
    assert len(parsed) == 2 and parsed[-1]["error"]


def test_a_partial_line_holding_a_key_is_dropped_at_the_cut(gateway: str) -> None:
    text = raw_stream(gateway, "cut-in-key")
    assert PROVIDER_KEY[:12] not in text and "exhausted" not in text
    parsed = events(text)
    assert len(parsed) == 2 and parsed[-1]["error"]

"""The OpenAI Responses API through the gateway, driven by the official openai SDK, over
simulated engines (which speak vLLM's Responses events and keep stored responses in memory)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import openai
import pytest

from gateway.sim.engine import create_engine_app
from tests.fixtures.gateway import (
    ENGINE_MODEL,
    PROVIDER_MODEL,
    PUBLIC_MODEL,
    TENANT_KEY,
    Fleet,
    engine,
    fleet_gateway,
    member,
    one_engine_gateway,
    provider,
)
from tests.fixtures.servers import UvicornThread

pytestmark = pytest.mark.integration


def sdk(gateway_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway_url + "/v1", api_key=TENANT_KEY, max_retries=0)


@pytest.fixture(scope="module")
def two_engines() -> Iterator[str]:
    """Two simulated engines behind one round-robin gateway: its URL."""
    members = {"e1": engine(default_max_tokens=6), "e2": engine(default_max_tokens=6)}
    with fleet_gateway(members) as (gateway, _):
        yield gateway.base_url


def test_a_stream_has_responses_event_order_usage_and_a_measured_ttft(two_engines: str) -> None:
    events = list(
        sdk(two_engines).responses.create(
            model=PUBLIC_MODEL, input="Hello", stream=True, max_output_tokens=4
        )
    )
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds.count("response.output_text.delta") == 4
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",  # max_output_tokens cut it, as vLLM and OpenAI say
    ]
    assert [event.sequence_number for event in events] == list(range(len(events)))
    final = events[-1].response  # type: ignore[union-attr]
    assert final.usage is not None and final.usage.output_tokens == 4
    assert final.model == PUBLIC_MODEL and events[0].response.model == PUBLIC_MODEL  # type: ignore[union-attr]
    metrics = httpx.get(two_engines + "/metrics").text
    ttft = re.findall(r'slo_gateway_ttft_seconds_count\{endpoint="e\d"[^}]*\} (\S+)', metrics)
    assert sum(float(count) for count in ttft) >= 1


def test_stream_helper_gets_the_final_response(two_engines: str) -> None:
    with sdk(two_engines).responses.stream(model=PUBLIC_MODEL, input="Hi") as stream:
        final = stream.get_final_response()
    assert final.status == "completed" and final.output_text == "The quick brown fox jumps over"
    assert final.model == PUBLIC_MODEL and final.usage is not None


def test_a_whole_response_names_the_public_model_and_the_upstream_one(two_engines: str) -> None:
    raw = sdk(two_engines).responses.with_raw_response.create(model=PUBLIC_MODEL, input="x")
    response = raw.parse()
    assert response.model == PUBLIC_MODEL and response.output_text
    assert raw.headers["x-slo-gateway-upstream-model"] == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert response.usage is not None and response.usage.input_tokens >= 1


def test_continued_turns_land_on_the_owner_and_stored_calls_go_there(two_engines: str) -> None:
    client = sdk(two_engines)
    first = client.responses.with_raw_response.create(model=PUBLIC_MODEL, input="Hi")
    owner, parent = first.headers["x-slo-gateway-endpoint"], first.parse()
    previous = parent.id
    for _ in range(3):  # round robin would alternate; the owner takes every turn
        turn = client.responses.with_raw_response.create(
            model=PUBLIC_MODEL, input="and then?", previous_response_id=previous
        )
        assert turn.headers["x-slo-gateway-endpoint"] == owner
        assert turn.headers["x-slo-gateway-decision"] == "owner"
        usage = turn.parse().usage
        assert usage is not None and usage.input_tokens > parent.usage.input_tokens  # type: ignore[union-attr]
        previous = turn.parse().id
    assert client.responses.retrieve(parent.id).id == parent.id
    assert client.responses.cancel(parent.id).id == parent.id
    assert [item.type for item in client.responses.input_items.list(parent.id)] == ["message"]
    client.responses.delete(parent.id)
    with pytest.raises(openai.NotFoundError) as gone:
        client.responses.retrieve(parent.id)
    assert gone.value.code == "response_not_found"


def test_an_unstored_response_cannot_be_continued(two_engines: str) -> None:
    client = sdk(two_engines)
    response = client.responses.create(model=PUBLIC_MODEL, input="Hi", store=False)
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.create(model=PUBLIC_MODEL, input="x", previous_response_id=response.id)
    assert missing.value.code == "response_not_found"
    assert missing.value.param == "previous_response_id"  # type: ignore[attr-defined]


def test_after_the_owner_restarts_a_continued_turn_is_a_404_not_a_reroute() -> None:
    with UvicornThread(create_engine_app(engine(default_max_tokens=4))) as owner:
        pricier = member(engine(default_max_tokens=4), price={"input_per_1m": 1.0})
        members: Fleet = {"owner": owner.base_url, "other": pricier}
        port = owner.port
        with fleet_gateway(members, policy={"name": "cost_first"}) as (gateway, _):
            client = sdk(gateway.base_url)
            raw = client.responses.with_raw_response.create(model=PUBLIC_MODEL, input="Hi")
            first = raw.parse()
            owner_id = raw.headers["x-slo-gateway-endpoint"]
            restarted = owner if owner_id == "owner" else None
            assert restarted is not None, "cost_first ranks the cheaper endpoint first"
            restarted.stop()
            with (
                UvicornThread(create_engine_app(engine()), port=port),
                pytest.raises(openai.NotFoundError) as lost,
            ):
                client.responses.create(
                    model=PUBLIC_MODEL, input="more", previous_response_id=first.id
                )
    assert lost.value.code == "response_owner_lost"
    assert "never moved" in lost.value.message


def test_a_mid_stream_kill_raises_the_sdks_error() -> None:
    faults = {"drop_mid_stream": 1.0, "drop_after_tokens": 2}
    with one_engine_gateway(engine(faults=faults)) as gateway:
        seen: list[str] = []
        with pytest.raises(openai.APIError) as failed:
            for event in sdk(gateway.base_url).responses.create(
                model=PUBLIC_MODEL, input="Hi", stream=True
            ):
                seen.append(event.type)
        assert seen.count("response.output_text.delta") == 2
        assert "mid-stream" in failed.value.message
        raw = httpx.post(
            gateway.base_url + "/v1/responses",
            json={"model": PUBLIC_MODEL, "input": "Hi", "stream": True},
            headers={"authorization": f"Bearer {TENANT_KEY}"},
        )
    assert raw.text.endswith("\n\n") and "event: response.failed" in raw.text


def test_the_public_model_name_holds_through_a_failover() -> None:
    broken = engine(faults={"status_code": 503})
    with fleet_gateway({"broken": broken, "hosted": provider(default_max_tokens=3)}) as (
        gateway,
        _,
    ):
        client = sdk(gateway.base_url)
        for _ in range(2):  # round robin: one of the two starts at the broken endpoint
            raw = client.responses.with_raw_response.create(model=PUBLIC_MODEL, input="x")
            assert raw.parse().model == PUBLIC_MODEL
            assert raw.headers["x-slo-gateway-upstream-model"] == PROVIDER_MODEL
            events = list(client.responses.create(model=PUBLIC_MODEL, input="x", stream=True))
            assert {e.response.model for e in events if hasattr(e, "response")} == {PUBLIC_MODEL}
            chunks = list(
                client.chat.completions.create(
                    model=PUBLIC_MODEL,
                    messages=[{"role": "user", "content": "x"}],
                    stream=True,
                )
            )
            assert {chunk.model for chunk in chunks} == {PUBLIC_MODEL}


def test_only_endpoints_declaring_the_api_serve_it() -> None:
    chat_only = one_engine_gateway(endpoint_id="chat-only", endpoint_options={"apis": ["chat"]})
    with chat_only as gateway, pytest.raises(openai.NotFoundError) as refused:
        sdk(gateway.base_url).responses.create(model=PUBLIC_MODEL, input="x")
    assert "not served through this API" in refused.value.message


def test_models_retrieve_answers_the_public_name(two_engines: str) -> None:
    client = sdk(two_engines)
    assert client.models.retrieve(PUBLIC_MODEL).id == PUBLIC_MODEL
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")


def test_the_switch_returns_the_upstream_name() -> None:
    server = {"admin_key_env": "TEST_ADMIN_KEY", "response_model": "upstream"}
    with one_engine_gateway(engine(default_max_tokens=2), server=server) as gateway:
        client = sdk(gateway.base_url)
        response = client.responses.create(model=PUBLIC_MODEL, input="x")
        events = list(client.responses.create(model=PUBLIC_MODEL, input="x", stream=True))
        chat = client.chat.completions.with_raw_response.create(
            model=PUBLIC_MODEL, messages=[{"role": "user", "content": "x"}]
        )
    assert response.model == ENGINE_MODEL
    assert events[0].response.model == ENGINE_MODEL  # type: ignore[union-attr]
    assert chat.parse().model == ENGINE_MODEL
    assert chat.headers["x-slo-gateway-upstream-model"] == ENGINE_MODEL


def test_a_continued_turn_is_served_partly_from_the_engines_prefix_cache(two_engines: str) -> None:
    client = sdk(two_engines)
    long_input = "Tell me about the sea. " * 40  # several KV blocks of prompt
    first = client.responses.create(model=PUBLIC_MODEL, input=long_input)
    turn = client.responses.create(model=PUBLIC_MODEL, input="More.", previous_response_id=first.id)
    assert first.usage is not None and turn.usage is not None
    cached = turn.usage.input_tokens_details.cached_tokens
    assert cached >= first.usage.input_tokens // 2  # the replayed prompt was cached

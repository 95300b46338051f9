"""A request that forces a tool is answered with a call to it, in each API's shape, streamed
and not, by the simulated engine and the simulated provider alike (official SDKs as clients)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from starlette.applications import Starlette

from gateway.sim.engine import EngineServerParams, create_engine_app
from gateway.sim.provider import ProviderParams, create_provider_app
from gateway.sim.wire import output_text
from tests.fixtures.servers import UvicornThread

pytestmark = pytest.mark.integration

KEY = "sk-test"
MODEL = "sim-model"
TOKENS = 5
ANSWER = {"text": "The quick brown fox jumps"}  # the first 5 output tokens
WEATHER: dict[str, Any] = {
    "name": "get_weather",
    "description": "The weather",
    "parameters": {"type": "object"},
}
CHAT_TOOL: Any = {"type": "function", "function": WEATHER}
RESPONSES_TOOL: dict[str, Any] = {"type": "function", **WEATHER}
MESSAGES_TOOL: dict[str, Any] = {"name": "get_weather", "input_schema": {"type": "object"}}


def _apps() -> dict[str, Starlette]:
    fast = {"ttft_median_s": 0.01, "ttft_sigma": 0.0, "tpot_median_s": 0.002, "tpot_sigma": 0.0}
    provider = ProviderParams.model_validate(fast | {"api_key": KEY, "model": MODEL})
    engine = EngineServerParams(model=MODEL, api_key=KEY)
    return {"engine": create_engine_app(engine), "provider": create_provider_app(provider)}


@pytest.fixture(scope="module", params=["engine", "provider"])
def base_url(request: pytest.FixtureRequest) -> Iterator[str]:
    with UvicornThread(_apps()[request.param]) as server:
        yield server.base_url


@pytest.mark.parametrize(
    "choice", [{"type": "function", "function": {"name": "get_weather"}}, "required"]
)
def test_chat_answers_a_forced_tool_with_tool_calls(base_url: str, choice: object) -> None:
    client = openai.OpenAI(base_url=base_url + "/v1", api_key=KEY, max_retries=0)
    ask: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "weather?"}]}
    ask |= {"tools": [CHAT_TOOL], "tool_choice": choice, "max_tokens": TOKENS}
    whole = client.chat.completions.create(**ask)
    assert whole.choices[0].finish_reason == "tool_calls"
    call = whole.choices[0].message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == ANSWER
    pieces, finish, names = [], None, set()
    for chunk in client.chat.completions.create(stream=True, **ask):
        delta = chunk.choices[0].delta
        for part in delta.tool_calls or []:
            assert part.index == 0
            names.add(part.function.name)
            pieces.append(part.function.arguments)
        assert not delta.content
        finish = chunk.choices[0].finish_reason or finish
    assert names - {None} == {"get_weather"} and finish == "tool_calls"
    assert json.loads("".join(pieces)) == ANSWER


def test_chat_without_a_forced_tool_answers_text(base_url: str) -> None:
    client = openai.OpenAI(base_url=base_url + "/v1", api_key=KEY, max_retries=0)
    answer = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "weather?"}],
        tools=[CHAT_TOOL],
        tool_choice="auto",
        max_tokens=TOKENS,
    )
    assert answer.choices[0].message.content == ANSWER["text"]
    assert answer.choices[0].message.tool_calls is None


@pytest.mark.parametrize("choice", [{"type": "function", "name": "get_weather"}, "required"])
def test_responses_answers_a_forced_tool_with_a_function_call(
    base_url: str, choice: object
) -> None:
    client = openai.OpenAI(base_url=base_url + "/v1", api_key=KEY, max_retries=0)
    ask: dict[str, Any] = {
        "model": MODEL,
        "input": "weather?",
        "tools": [RESPONSES_TOOL],
        "tool_choice": choice,
    }
    whole = client.responses.create(**ask)
    (item,) = whole.output
    assert item.type == "function_call" and item.name == "get_weather"
    assert json.loads(item.arguments) == {"text": output_text(whole.usage.output_tokens)}
    events = list(client.responses.create(stream=True, **ask))
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    (done,) = [e for e in events if e.type == "response.output_item.done"]
    assert done.item.type == "function_call" and done.item.arguments == "".join(deltas)
    assert events[-1].type == "response.completed"


@pytest.mark.parametrize("choice", [{"type": "tool", "name": "get_weather"}, {"type": "any"}])
def test_messages_answers_a_forced_tool_with_tool_use(base_url: str, choice: object) -> None:
    client = anthropic.Anthropic(base_url=base_url, api_key=KEY, max_retries=0)
    ask: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": TOKENS,
        "tools": [MESSAGES_TOOL],
        "tool_choice": choice,
    }
    ask |= {"messages": [{"role": "user", "content": "weather?"}]}
    whole = client.messages.create(**ask)
    assert whole.stop_reason == "tool_use"
    (block,) = whole.content
    assert block.type == "tool_use" and block.name == "get_weather" and block.input == ANSWER
    with client.messages.stream(**ask) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    (streamed,) = final.content
    assert streamed.type == "tool_use" and streamed.input == ANSWER

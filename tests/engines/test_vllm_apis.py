"""Responses and Anthropic Messages through the gateway to a real vLLM, via the official SDKs:
the same routing, the same stream grammars, the engine's own answers."""

from __future__ import annotations

import anthropic
import pytest

from tests.engines.stack import ENDPOINT_ID, sdk_client
from tests.engines.vllm_server import TEST_TIMEOUT_S
from tests.engines.workload import prompt
from tests.fixtures.gateway import PUBLIC_MODEL, TENANT_KEY
from tests.fixtures.servers import UvicornThread

pytestmark = [pytest.mark.engine, pytest.mark.timeout(TEST_TIMEOUT_S)]


def test_responses_stream_and_whole_through_the_gateway(gateway: UvicornThread) -> None:
    with sdk_client(gateway) as client:
        raw = client.responses.with_raw_response.create(
            model=PUBLIC_MODEL, input=prompt(40, seed=11), max_output_tokens=8
        )
        whole = raw.parse()
        assert raw.headers["x-slo-gateway-endpoint"] == ENDPOINT_ID
        assert whole.model == PUBLIC_MODEL and whole.output_text
        assert whole.usage is not None and whole.usage.output_tokens == 8
        events = list(
            client.responses.create(
                model=PUBLIC_MODEL, input=prompt(40, seed=12), max_output_tokens=8, stream=True
            )
        )
    kinds = [event.type for event in events]
    first_delta = kinds.index("response.output_text.delta")
    assert kinds[0] == "response.created" and kinds.index("response.created") < first_delta
    assert kinds[-1] == "response.completed"
    final = events[-1].response  # type: ignore[union-attr]
    assert final.usage is not None and final.usage.output_tokens == 8


def test_messages_stream_and_whole_through_the_gateway(gateway: UvicornThread) -> None:
    client = anthropic.Anthropic(base_url=gateway.base_url, api_key=TENANT_KEY, max_retries=0)
    message = client.messages.create(
        model=PUBLIC_MODEL,
        max_tokens=8,
        messages=[{"role": "user", "content": prompt(40, seed=13)}],
    )
    assert message.model == PUBLIC_MODEL and message.content
    assert message.usage.output_tokens == 8
    with client.messages.stream(
        model=PUBLIC_MODEL,
        max_tokens=8,
        messages=[{"role": "user", "content": prompt(40, seed=14)}],
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.usage.output_tokens == 8

"""Chat through the gateway to a real vLLM: answers, errors and aborts, via the openai SDK."""

from __future__ import annotations

import time
from collections.abc import Iterator

import openai
import pytest

from tests.engines.stack import ENDPOINT_ID, EXACT_LENGTH, sdk_client, stream_chat
from tests.engines.vllm_server import TEST_TIMEOUT_S, VllmServer
from tests.engines.workload import prompt, sample_sum
from tests.fixtures.gateway import PUBLIC_MODEL, eventually
from tests.fixtures.servers import UvicornThread

pytestmark = [pytest.mark.engine, pytest.mark.timeout(TEST_TIMEOUT_S)]


@pytest.fixture
def client(gateway: UvicornThread) -> Iterator[openai.OpenAI]:
    with sdk_client(gateway) as sdk:
        yield sdk


def test_non_stream_chat_returns_vllms_completion(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(
        model=PUBLIC_MODEL,
        messages=[{"role": "user", "content": prompt(40, seed=1)}],
        max_tokens=8,
        extra_body=EXACT_LENGTH,
    )
    completion = raw.parse()
    assert raw.headers["x-slo-gateway-endpoint"] == ENDPOINT_ID
    assert completion.choices[0].finish_reason == "length"
    assert completion.choices[0].message.content
    assert completion.usage is not None and completion.usage.completion_tokens == 8
    # --enable-prompt-tokens-details: the cached-token count comes through the gateway.
    details = completion.usage.prompt_tokens_details
    assert details is not None and details.cached_tokens is not None


def test_stream_chat_relays_vllms_chunks_then_usage(client: openai.OpenAI) -> None:
    stream = stream_chat(client, prompt(40, seed=2), 8, stream_options={"include_usage": True})
    chunks = list(stream)
    choices = [chunk.choices[0] for chunk in chunks if chunk.choices]
    assert choices[0].delta.role == "assistant"
    # One chunk per token, less any whose bytes end mid-character (held for the next one).
    assert 1 <= sum(1 for choice in choices if choice.delta.content) <= 8
    assert [c.finish_reason for c in choices if c.finish_reason] == ["length"]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8


def test_an_over_long_prompt_is_refused_by_the_window_vllm_reports(client: openai.OpenAI) -> None:
    """The gateway learns the engine's max_model_len from vLLM's /v1/models and refuses a
    prompt that cannot fit before sending it, as the OpenAI error vLLM would give."""
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(
            model=PUBLIC_MODEL,
            messages=[{"role": "user", "content": prompt(4500, seed=3)}],  # > max-model-len
            max_tokens=8,
        )
    assert error.value.status_code == 400
    assert error.value.code == "context_length_exceeded"
    assert error.value.param == "messages"
    assert "context window of 4096 tokens" in error.value.message


def running(server: VllmServer) -> float:
    return sample_sum(server.metrics(), "vllm:num_requests_running")


def generated(server: VllmServer) -> float:
    return sample_sum(server.metrics(), "vllm:generation_tokens_total")


@pytest.mark.flaky(reruns=2)  # vLLM's /metrics, read before and after, can stall under load
def test_a_client_that_disconnects_mid_stream_aborts_its_engine_request(
    client: openai.OpenAI, vllm: VllmServer
) -> None:
    generated_before = generated(vllm)
    # 3,000 tokens are 30 s and more of decoding: only an abort ends it within the waits below.
    stream = stream_chat(client, prompt(40, seed=4), 3000)
    for _, _chunk in zip(range(5), stream, strict=False):
        pass
    # Closed at once: five chunks of a 3,000-token stream say the engine is decoding it. A
    # /metrics poll here first took about 25 s in one CI dry run, and the stream had ended.
    stream.close()
    assert eventually(lambda: running(vllm) == 0, 5)
    stopped_at = generated(vllm)
    time.sleep(1.0)  # vLLM does not count aborts as finished requests: watch decoding stop
    assert generated(vllm) == stopped_at
    assert stopped_at - generated_before < 3000

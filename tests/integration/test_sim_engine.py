"""The simulated vLLM server on a real uvicorn socket: wire format, metrics, faults, aborts."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.sim.engine import EngineServerParams, create_engine_app
from tests.fixtures.servers import UvicornThread, serve_app

pytestmark = pytest.mark.integration

MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"


def chat(content: str = "hello", **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}]} | extra


async def sse_events(response: httpx.Response) -> list[str]:
    raw = b"".join([chunk async for chunk in response.aiter_bytes()]).decode()
    assert raw.endswith("\n\n")
    parts = raw.split("\n\n")[:-1]
    assert all(part.startswith("data: ") for part in parts)
    return [part[len("data: ") :] for part in parts]


async def stats(client: httpx.AsyncClient) -> dict[str, Any]:
    result: dict[str, Any] = (await client.get("/sim/stats")).json()
    return result


async def wait_for(client: httpx.AsyncClient, **expected: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 5
    while True:
        current = await stats(client)
        if all(current[k] == v for k, v in expected.items()) or time.monotonic() > deadline:
            return current
        await asyncio.sleep(0.02)


@pytest.fixture
async def engine() -> AsyncIterator[httpx.AsyncClient]:
    app = create_engine_app(EngineServerParams(seed=1))
    async with serve_app(app) as base_url, httpx.AsyncClient(base_url=base_url, timeout=10) as c:
        yield c


async def test_chat_stream_is_exact_openai_sse(engine: httpx.AsyncClient) -> None:
    body = chat(max_tokens=5, stream=True, stream_options={"include_usage": True})
    async with engine.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        data = await sse_events(response)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    content = [c for c in chunks if c["choices"]]
    assert len(content) == 5
    first = content[0]["choices"][0]
    assert first["delta"]["role"] == "assistant" and first["delta"]["content"]
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == MODEL for c in chunks)
    assert [c["choices"][0]["finish_reason"] for c in content] == [None] * 4 + ["length"]
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}


async def test_stream_without_usage_option_has_no_usage_chunk(engine: httpx.AsyncClient) -> None:
    body = {"model": MODEL, "prompt": "hi there", "max_tokens": 3, "stream": True}
    async with engine.stream("POST", "/v1/completions", json=body) as response:
        data = await sse_events(response)
    chunks = [json.loads(d) for d in data[:-1]]
    assert data[-1] == "[DONE]" and len(chunks) == 3
    assert all(c["object"] == "text_completion" and c["choices"][0]["text"] for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


async def test_non_stream_bodies_carry_text_and_usage(engine: httpx.AsyncClient) -> None:
    chat_body = (await engine.post("/v1/chat/completions", json=chat("x" * 40))).json()
    assert chat_body["object"] == "chat.completion"
    assert chat_body["choices"][0]["message"]["role"] == "assistant"
    assert chat_body["choices"][0]["finish_reason"] == "stop"
    assert chat_body["usage"] == {"prompt_tokens": 14, "completion_tokens": 64, "total_tokens": 78}
    body = {"model": MODEL, "prompt": "p", "max_tokens": 2}
    text = await engine.post("/v1/completions", json=body)
    assert text.json()["choices"][0]["text"] == "The quick"


async def test_unknown_model_is_404_and_stats_record_the_name(engine: httpx.AsyncClient) -> None:
    response = await engine.post("/v1/chat/completions", json=chat() | {"model": "llama-3-8b"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    current = await stats(engine)
    assert current["last_model"] == "llama-3-8b" and current["authorization_present"] is False


async def test_too_long_request_is_400(engine: httpx.AsyncClient) -> None:
    response = await engine.post("/v1/chat/completions", json=chat(max_tokens=9000))
    assert response.status_code == 400
    assert "maximum context length" in response.json()["error"]["message"]


async def test_models_health_and_embeddings(engine: httpx.AsyncClient) -> None:
    models = (await engine.get("/v1/models")).json()
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert (await engine.get("/health")).status_code == 200
    embedded = await engine.post("/v1/embeddings", json={"model": MODEL, "input": ["a", "b"]})
    assert len(embedded.json()["data"]) == 2


async def test_metrics_parse_and_use_real_vllm_names(engine: httpx.AsyncClient) -> None:
    await engine.post("/v1/chat/completions", json=chat(max_tokens=3))
    text = (await engine.get("/metrics")).text
    samples = {
        (s.name, s.labels.get("reason")): s
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:num_preemptions_total",
        "vllm:time_to_first_token_seconds_count",
        "vllm:inter_token_latency_seconds_count",
        "vllm:e2e_request_latency_seconds_count",
    ):
        assert (name, None) in samples, name
    assert ("vllm:num_requests_waiting_by_reason", "capacity") in samples
    assert ("vllm:num_requests_waiting_by_reason", "deferred") in samples
    assert samples[("vllm:prompt_tokens_total", None)].value == 5
    assert samples[("vllm:generation_tokens_total", None)].value == 3
    assert samples[("vllm:time_to_first_token_seconds_count", None)].value == 1
    assert samples[("vllm:inter_token_latency_seconds_count", None)].value == 2
    assert samples[("vllm:prefix_cache_queries_total", None)].value == 5
    assert samples[("vllm:prefix_cache_hits_total", None)].value == 0
    config = samples[("vllm:cache_config_info", None)].labels
    assert (config["block_size"], config["num_gpu_blocks"]) == ("16", "2048")
    assert (config["kv_cache_size_tokens"], config["enable_prefix_caching"]) == ("32768", "True")
    assert config["model_name"] == MODEL and config["engine"] == "0"
    assert "vllm:gpu_cache_usage_perc" not in text
    assert "vllm:gpu_prefix_cache_hits" not in text


def test_legacy_metrics_add_v0_names() -> None:
    app = create_engine_app(EngineServerParams(legacy_metrics=True))
    with UvicornThread(app) as server:
        text = httpx.get(server.base_url + "/metrics").text
    names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert {"vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc"} <= names
    legacy_prefix = {
        "vllm:gpu_prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_hits_total",
        "vllm:gpu_prefix_cache_hit_rate",
    }
    assert legacy_prefix | {"vllm:prefix_cache_hits_total"} <= names


LONG = "x" * 4000  # 1,004 prompt tokens as one chat message: 62 full blocks and a bit


async def usage_of(engine: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    if not body.get("stream"):
        usage: dict[str, Any] = (await engine.post("/v1/chat/completions", json=body)).json()
        return usage["usage"]
    async with engine.stream("POST", "/v1/chat/completions", json=body) as response:
        data = await sse_events(response)
    last: dict[str, Any] = json.loads(data[-2])
    return last["usage"]


async def test_cached_tokens_come_back_in_whole_and_streamed_answers(
    engine: httpx.AsyncClient,
) -> None:
    whole = chat(LONG, max_tokens=2)
    streamed = whole | {"stream": True, "stream_options": {"include_usage": True}}
    cold = await usage_of(engine, whole)
    assert (
        cold["prompt_tokens"] == 1004 and "prompt_tokens_details" not in cold
    )  # vLLM: 0 is left out
    assert (await usage_of(engine, whole))["prompt_tokens_details"] == {"cached_tokens": 992}
    assert (await usage_of(engine, streamed))["prompt_tokens_details"] == {"cached_tokens": 992}
    text = (await engine.get("/metrics")).text
    samples = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples["vllm:prefix_cache_queries_total"] == 3 * 1004
    assert samples["vllm:prefix_cache_hits_total"] == 2 * 992


async def test_the_next_turn_hits_the_previous_answer(engine: httpx.AsyncClient) -> None:
    first = await engine.post("/v1/chat/completions", json=chat(LONG, max_tokens=200))
    answer = first.json()["choices"][0]["message"]
    turns = [{"role": "user", "content": LONG}, answer, {"role": "user", "content": "go on"}]
    second = {"model": MODEL, "messages": turns, "max_tokens": 2}
    cached = (await usage_of(engine, second))["prompt_tokens_details"]["cached_tokens"]
    # Turn 1 computed 1,004 + 200 - 1 tokens: 75 full blocks, all within turn 2's text
    # (4,024 characters of prompt and 880 of answer: 76 blocks of 64 characters).
    assert cached == 75 * 16


async def test_a_cache_salt_keeps_requests_apart(engine: httpx.AsyncClient) -> None:
    await usage_of(engine, chat(LONG, max_tokens=2, cache_salt="tenant-a"))
    other = await usage_of(engine, chat(LONG, max_tokens=2, cache_salt="tenant-b"))
    same = await usage_of(engine, chat(LONG, max_tokens=2, cache_salt="tenant-a"))
    assert "prompt_tokens_details" not in other
    assert same["prompt_tokens_details"] == {"cached_tokens": 992}


async def test_prefix_caching_off_never_reports_cached_tokens() -> None:
    app = create_engine_app(EngineServerParams(enable_prefix_caching=False))
    async with serve_app(app) as base_url, httpx.AsyncClient(base_url=base_url) as client:
        for _ in range(2):
            assert "prompt_tokens_details" not in await usage_of(client, chat(LONG, max_tokens=2))
        text = (await client.get("/metrics")).text
    config = next(
        f for f in text_string_to_metric_families(text) if f.name == "vllm:cache_config_info"
    )
    assert config.samples[0].labels["enable_prefix_caching"] == "False"


async def test_error_fault_answers_500_before_any_byte(engine: httpx.AsyncClient) -> None:
    patched = await engine.post("/sim/faults", json={"error_rate": 1.0})
    assert patched.json()["error_rate"] == 1.0
    response = await engine.post("/v1/chat/completions", json=chat(stream=True))
    assert response.status_code == 500 and response.json()["error"]["type"] == "server_error"
    await engine.post("/sim/faults", json={"error_rate": 0.0})
    assert (await engine.post("/v1/chat/completions", json=chat(max_tokens=1))).status_code == 200


async def test_status_code_fault_also_fails_health(engine: httpx.AsyncClient) -> None:
    await engine.post("/sim/faults", json={"status_code": 503})
    assert (await engine.post("/v1/chat/completions", json=chat())).status_code == 503
    assert (await engine.get("/health")).status_code == 503


async def test_invalid_fault_patch_is_400(engine: httpx.AsyncClient) -> None:
    assert (await engine.post("/sim/faults", json={"error_rate": 2})).status_code == 400
    assert (await engine.post("/sim/faults", json={"nope": 1})).status_code == 400


async def test_hang_fault_times_the_client_out(engine: httpx.AsyncClient) -> None:
    await engine.post("/sim/faults", json={"hang": True})
    with pytest.raises(httpx.ReadTimeout):
        await engine.post("/v1/chat/completions", json=chat(), timeout=0.3)
    assert (await wait_for(engine, cancelled=1))["cancelled"] == 1


async def test_drop_fault_breaks_the_stream_mid_way(engine: httpx.AsyncClient) -> None:
    await engine.post("/sim/faults", json={"drop_mid_stream": 1.0, "drop_after_tokens": 2})
    received: list[bytes] = []
    with pytest.raises(httpx.RemoteProtocolError):
        body = chat(max_tokens=20, stream=True)
        async with engine.stream("POST", "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            async for chunk in response.aiter_bytes():
                received.append(chunk)
    text = b"".join(received).decode()
    assert text.count("data: ") == 2 and "[DONE]" not in text
    assert (await wait_for(engine, dropped=1, running=0))["dropped"] == 1


async def test_client_disconnect_frees_the_sequence(engine: httpx.AsyncClient) -> None:
    body = chat(max_tokens=2000, stream=True)
    async with engine.stream("POST", "/v1/chat/completions", json=body) as response:
        iterator = response.aiter_lines()
        await anext(iterator)
        busy = await stats(engine)
    assert busy["running"] == 1 and busy["kv_usage"] > 0
    idle = await wait_for(engine, running=0, cancelled=1, in_progress=0)
    assert (idle["running"], idle["cancelled"], idle["kv_usage"]) == (0, 1, 0.0)


async def test_non_stream_client_timeout_frees_the_sequence(engine: httpx.AsyncClient) -> None:
    with pytest.raises(httpx.ReadTimeout):
        await engine.post("/v1/chat/completions", json=chat(max_tokens=2000), timeout=0.3)
    idle = await wait_for(engine, running=0, cancelled=1)
    assert (idle["running"], idle["cancelled"]) == (0, 1)


async def test_slowdown_fault_stretches_decoding(engine: httpx.AsyncClient) -> None:
    async def duration_s() -> float:
        start = time.monotonic()
        await engine.post("/v1/chat/completions", json=chat(max_tokens=10))
        return time.monotonic() - start

    normal = await duration_s()
    await engine.post("/sim/faults", json={"slowdown": 4.0})
    assert await duration_s() > 2 * normal

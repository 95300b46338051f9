"""The load test's client: request bodies, stream timing (on fake lines and on a real simulated
engine), and the user pools sized from a plan."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from gateway.bench.api_events import PATHS, Api, api_headers
from gateway.sim.engine import EngineServerParams, create_engine_app
from gateway.sim.faults import Faults
from gateway.sim.model import EngineModel
from gateway.sim.wire import engine_prompt_tokens
from loadtests.plan import PlannedCall, pools
from loadtests.stream import call_body, lines, measure_call, read_stream
from tests.fixtures.servers import UvicornThread

pytestmark = pytest.mark.integration

MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"


def sse(payload: dict[str, Any] | str) -> bytes:
    return b"data: " + (payload if isinstance(payload, str) else json.dumps(payload)).encode()


def delta(content: str | None = None, role: str | None = None) -> bytes:
    body = {k: v for k, v in (("role", role), ("content", content)) if v is not None}
    return sse({"choices": [{"index": 0, "delta": body}]})


def ticking() -> Iterator[float]:
    return (float(t) for t in itertools.count(1))


def call(index: int = 0, prompt: int = 500, output: int = 20, **fields: Any) -> PlannedCall:
    base = {
        "index": index,
        "arrival_s": 0.0,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "tenant": "app",
        "slo_class": "interactive",
    }
    return PlannedCall(**(base | fields))


def test_lines_come_out_whole_however_the_bytes_are_cut() -> None:
    chunks = [b'data: {"a"', b": 1}\n\nda", b"ta: [DONE]\n", b"\n"]
    assert list(lines(chunks)) == [b'data: {"a": 1}', b"", b"data: [DONE]", b""]


def test_ttft_starts_at_the_first_non_empty_content() -> None:
    clock = ticking()
    lines = [
        b": ping",
        b"",
        delta(role="assistant", content=""),
        delta(content="Hi"),
        b"",
        delta(content=" there"),
        delta(content=" you"),
        sse({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}),
        sse("[DONE]"),
    ]
    result = read_stream(lines, lambda: next(clock))
    assert (result.first_s, result.last_s, result.content_events) == (1.0, 3.0, 3)
    assert (result.output_tokens, result.prompt_tokens, result.done) == (3, 7, True)


def test_tokens_are_counted_without_usage_and_errors_end_the_stream() -> None:
    clock = ticking()
    counted = read_stream(
        [delta(content="a"), delta(content="b"), sse("[DONE]")], lambda: next(clock)
    )
    assert counted.output_tokens == 2 and counted.error is None
    failed = read_stream(
        [delta(content="a"), sse({"error": {"code": "upstream_stream_interrupted"}})]
    )
    assert failed.error == "upstream_stream_interrupted" and not failed.done
    cut = read_stream([delta(content="a")])
    assert cut.error == "stream ended without [DONE]"


def test_the_prompt_has_the_planned_length_for_the_simulated_engine() -> None:
    for tokens in (5, 120, 3000):
        assert engine_prompt_tokens(call_body(MODEL, call(prompt=tokens)), "chat") == tokens


def test_pools_cover_the_peak_and_respect_the_user_cap() -> None:
    burst = [call(i, output=100, arrival_s=i * 0.1) for i in range(50)]
    other = [call(100 + i, tenant="b", arrival_s=i) for i in range(5)]
    sized = pools(burst + other, max_users=1000)
    assert sized["app.interactive"] >= 50  # all 50 overlap if each took 7 s
    assert sized["b.interactive"] == 6  # 3 s each, a second apart: 3 at once, x1.5 + 1
    capped = pools(burst + other, max_users=20)
    assert sum(capped.values()) <= 20 and min(capped.values()) >= 1


def test_measures_a_real_stream_against_the_engine_model() -> None:
    params = EngineServerParams(model=MODEL)
    model = EngineModel(params)
    model.submit("probe", 500, 20)
    first_step_s = model.step().duration_s  # prefill of the whole prompt, first token out
    with UvicornThread(create_engine_app(params)) as server, requests.Session() as session:
        t0 = time.perf_counter()
        response = session.post(
            server.base_url + "/v1/chat/completions", json=call_body(MODEL, call()), stream=True
        )
        measured = measure_call(response, t0)
    assert measured.completed and measured.status == 200 and measured.reason == ""
    assert measured.output_tokens == 20 and measured.prompt_tokens == 500
    assert measured.ttft_s is not None and measured.tpot_s is not None
    assert first_step_s * 0.9 <= measured.ttft_s <= first_step_s + 0.5
    assert 0.005 < measured.tpot_s < 0.5
    assert measured.e2e_s >= measured.ttft_s + 19 * 0.005


def test_an_error_status_is_measured_with_its_code() -> None:
    params = EngineServerParams(model=MODEL, faults=Faults(status_code=503))
    with UvicornThread(create_engine_app(params)) as server:
        response = requests.post(
            server.base_url + "/v1/chat/completions",
            json=call_body(MODEL, call()),
            stream=True,
            timeout=10,
        )
        measured = measure_call(response, 0.0, clock=lambda: 1.5)
    assert (measured.status, measured.completed, measured.gateway_reason) == (503, False, False)
    assert measured.reason == "server_error" and measured.e2e_s == 1.5


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_measures_responses_and_messages_streams(api: Api) -> None:
    params = EngineServerParams(model=MODEL)
    with UvicornThread(create_engine_app(params)) as server, requests.Session() as session:
        t0 = time.perf_counter()
        response = session.post(
            server.base_url + "/v1" + PATHS[api],
            json=call_body(MODEL, call(), api),
            headers=api_headers(api),
            stream=True,
        )
        measured = measure_call(response, t0, api=api)
    assert measured.completed and measured.status == 200 and measured.reason == ""
    assert measured.output_tokens == 20 and measured.prompt_tokens >= 400
    assert measured.ttft_s is not None and measured.tpot_s is not None

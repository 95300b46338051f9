"""KV saturation on a real vLLM: the gateway sheds the sheddable class and serves interactive.

The session's server has an 8,192-token KV cache. Batch requests of 1,500 prompt + 300 output
tokens arrive first: the gateway admits them while their footprint leaves the cache below its
open line (kv_threshold 0.8 less the reserve, about 5,700 tokens), so three or four run and the
rest are refused with 429. Interactive requests then arrive one by one and must all be served
within their class's TTFT target: the reserve above that line is theirs.
"""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import dataclass

import openai
import pytest

from tests.engines.stack import gateway_over, sdk_client, stream_chat
from tests.engines.vllm_server import TEST_TIMEOUT_S, VllmServer
from tests.engines.workload import prompt, sample_sum
from tests.fixtures.gateway import config, eventually

pytestmark = [pytest.mark.engine, pytest.mark.timeout(TEST_TIMEOUT_S)]
BATCH_REQUESTS = 14
INTERACTIVE_REQUESTS = 10
SHED_REASONS = {"saturated", "reserved_for_higher_priority"}
INTERACTIVE_TTFT_S = config([])["classes"]["interactive"]["ttft_ms"] / 1000


@dataclass(frozen=True, slots=True)
class Outcome:
    status: int
    reason: str  # x-slo-gateway-reason, "" when served
    ttft_s: float | None


def send(client: openai.OpenAI, slo_class: str, content: str, max_tokens: int) -> Outcome:
    """One streamed chat of `slo_class`; a refusal is an outcome, not an error."""
    started = time.perf_counter()
    try:
        stream = stream_chat(client, content, max_tokens, extra_headers={"x-slo-class": slo_class})
    except openai.APIStatusError as error:
        return Outcome(
            error.status_code, error.response.headers.get("x-slo-gateway-reason", ""), None
        )
    ttft_s = None
    for chunk in stream:
        if ttft_s is None and chunk.choices and chunk.choices[0].delta.content:
            ttft_s = time.perf_counter() - started
    return Outcome(200, "", ttft_s)


def test_on_a_full_kv_cache_batch_is_shed_and_interactive_is_served(vllm: VllmServer) -> None:
    with (
        gateway_over(vllm, policy={"name": "least_loaded"}) as gateway,
        sdk_client(gateway) as client,
        concurrent.futures.ThreadPoolExecutor(BATCH_REQUESTS) as pool,
    ):
        batch = []
        for seed in range(300, 300 + BATCH_REQUESTS):
            batch.append(pool.submit(send, client, "batch", prompt(1500, seed), 300))
            time.sleep(0.1)  # arrivals, not one burst: each sees the footprint admitted so far
        interactive = []
        for seed in range(400, 400 + INTERACTIVE_REQUESTS):
            interactive.append(send(client, "interactive", prompt(100, seed), 8))
            time.sleep(0.2)
        batch_outcomes = [future.result() for future in batch]
    shed = [outcome.reason for outcome in batch_outcomes if outcome.status == 429]
    served = [outcome for outcome in batch_outcomes if outcome.status == 200]
    ttfts = sorted(outcome.ttft_s or 0.0 for outcome in interactive)
    print(
        f"batch: {len(shed)} shed {sorted(set(shed))}, {len(served)} served; "
        f"interactive TTFT p50 {ttfts[len(ttfts) // 2]:.3f} s, max {ttfts[-1]:.3f} s"
    )
    assert [outcome.status for outcome in interactive] == [200] * INTERACTIVE_REQUESTS
    assert ttfts[int(0.9 * len(ttfts)) - 1] <= INTERACTIVE_TTFT_S  # p90 within the class target
    assert shed and served, batch_outcomes
    assert set(shed) <= SHED_REASONS
    assert len(shed) + len(served) == BATCH_REQUESTS
    assert eventually(lambda: sample_sum(vllm.metrics(), "vllm:num_requests_running") == 0, 10)

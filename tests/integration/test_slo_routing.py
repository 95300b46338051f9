"""SLO-aware routing and admission on the simulated fleet, through real servers."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import httpx
import openai
import pytest

from gateway.config.settings import parse_config
from tests.fixtures.gateway import (
    PUBLIC_MODEL,
    TENANT_KEY,
    admin_endpoints,
    chat_body,
    engine,
    eventually,
    fleet_config,
    fleet_gateway,
    member,
    one_engine_gateway,
    running_gateway,
    runtime_of,
)

pytestmark = pytest.mark.integration
AUTH = {"authorization": f"Bearer {TENANT_KEY}"}
SLO_AWARE = {"name": "slo_aware", "explore_fraction": 0.0, "estimate": {"min_samples": 5}}


def chat(base_url: str, content: str, **extra: Any) -> httpx.Response:
    body = chat_body(content, **({"max_tokens": 4} | extra))
    return httpx.post(base_url + "/v1/chat/completions", json=body, headers=AUTH, timeout=60)


def flood(root_url: str, count: int, max_tokens: int) -> list[threading.Thread]:
    """Long requests sent straight to an engine, bypassing the gateway, to build its queue."""

    def one() -> None:
        body = chat_body("x", model="meta-llama/Meta-Llama-3-8B-Instruct", max_tokens=max_tokens)
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(root_url + "/v1/chat/completions", json=body, timeout=60)

    threads = [threading.Thread(target=one, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads


def test_interactive_requests_avoid_an_engine_whose_queue_is_long() -> None:
    members = {"busy": engine(max_num_seqs=2), "idle": engine()}
    with fleet_gateway(members, policy=SLO_AWARE) as (gateway, urls):
        flood(urls["busy"], count=12, max_tokens=300)

        def queue_seen() -> bool:
            signals = admin_endpoints(gateway.base_url)["busy"]["engine"]
            return bool(signals and (signals["waiting"] or 0) >= 5)

        assert eventually(queue_seen)
        chosen = [chat(gateway.base_url, "Hi").headers["x-slo-gateway-endpoint"] for _ in range(10)]
    assert chosen.count("idle") >= 9, chosen


def test_a_long_prompt_goes_to_the_fastest_prefill_even_when_a_short_one_does_not() -> None:
    fast = engine(prefill_per_token_s=0.00004, prefill_quadratic_s=0.0)
    slow = engine(prefill_per_token_s=0.0004, prefill_quadratic_s=0.0)
    members = {
        "fast-prefill": member(fast, price={"input_per_1m": 1.0, "output_per_1m": 2.0}),
        "slow-prefill": member(slow, price={"input_per_1m": 0.1, "output_per_1m": 0.2}),
    }
    # Round robin while warming up; then the same config with the SLO-aware policy.
    with fleet_config(members) as (data, _), running_gateway(data) as gateway:
        for i, length in enumerate([100, 1500] * 6):
            # Unique prompts (the engines cache prefixes): each warm-up measures a cold prefill.
            prompt = f"{i:04d}" + "w" * 4 * length
            warmup = chat(gateway.base_url, prompt, stream=True)  # streams: TTFT
            assert warmup.status_code == 200
        runtime_of(gateway).apply(parse_config(data | {"policy": SLO_AWARE}))
        assert eventually(lambda: _warm(gateway.base_url), 5)
        short = chat(gateway.base_url, "s" * 4 * 100)
        long = chat(gateway.base_url, "l" * 4 * 6000)
    assert short.headers["x-slo-gateway-endpoint"] == "slow-prefill"  # cheapest meeting the SLO
    assert long.headers["x-slo-gateway-endpoint"] == "fast-prefill"
    assert long.headers["x-slo-gateway-at-risk"] == "false"


def test_a_cold_engine_counts_the_prefill_it_was_sent_until_that_first_token() -> None:
    slow = engine(prefill_per_token_s=0.0005, prefill_quadratic_s=0.0)  # 6,000 tokens: 3 s
    with fleet_gateway({"slow": slow}, policy=SLO_AWARE) as (gateway, _):
        client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TENANT_KEY, max_retries=0)

        def predicted_ttft_s(prompt: str) -> float:
            messages: Any = [{"role": "user", "content": prompt}]
            raw = client.chat.completions.with_raw_response.create(
                model=PUBLIC_MODEL, messages=messages, max_tokens=4
            )
            return float(raw.headers["x-slo-gateway-predicted-ttft-ms"]) / 1000

        def prefill_tokens() -> int:
            counted: int = admin_endpoints(gateway.base_url)["slow"]["prefill_tokens"]
            return counted

        idle_s = predicted_ttft_s("a" + "x" * 4 * 1000)
        first_token = threading.Event()

        def long_stream() -> None:
            messages: Any = [{"role": "user", "content": "b" + "y" * 4 * 6000}]
            stream = client.chat.completions.create(
                model=PUBLIC_MODEL, messages=messages, max_tokens=300, stream=True
            )
            for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    first_token.set()

        streaming = threading.Thread(target=long_stream, daemon=True)
        streaming.start()
        assert eventually(lambda: prefill_tokens() >= 5000, 5), prefill_tokens()
        behind_s = predicted_ttft_s("c" + "x" * 4 * 1000)  # sent while the long one prefills
        assert first_token.wait(30)
        # counted until its first token, not until its end: it is still streaming
        assert eventually(lambda: prefill_tokens() == 0, 5), prefill_tokens()
        assert streaming.is_alive()
        streaming.join(60)
    # about (1 - warmth) x the prior's slope x 6,000 tokens: 0.8 x 1e-4 x 6,000 = 0.48 s
    assert behind_s - idle_s >= 0.4, (idle_s, behind_s)


def _warm(base_url: str) -> bool:
    return all(e["estimate"]["samples"] >= 6 for e in admin_endpoints(base_url).values())


class Ramp:
    """Batch (sheddable) streams added one by one, with interactive probes alongside."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.batch: list[tuple[int, str]] = []  # (status, reason header)
        self.interactive: list[tuple[int, float | None]] = []  # (status, TTFT)
        self._lock = threading.Lock()

    def batch_request(self) -> None:
        body = chat_body("b" * 1600, max_tokens=300, stream=True)
        headers = AUTH | {"x-slo-class": "batch"}
        url = self.base_url + "/v1/chat/completions"
        response = httpx.post(url, json=body, headers=headers, timeout=60)
        with self._lock:
            self.batch.append(
                (response.status_code, response.headers.get("x-slo-gateway-reason", ""))
            )

    def interactive_request(self) -> None:
        started = time.perf_counter()
        ttft = None
        body = chat_body("i" * 200, max_tokens=8, stream=True)
        with httpx.stream(
            "POST", self.base_url + "/v1/chat/completions", json=body, headers=AUTH, timeout=60
        ) as response:
            for chunk in response.iter_bytes():
                if ttft is None and b'"content"' in chunk:
                    ttft = time.perf_counter() - started
        self.interactive.append((response.status_code, ttft))


def test_under_a_kv_pressure_ramp_batch_is_shed_while_interactive_keeps_its_ttft() -> None:
    small = engine(num_gpu_blocks=256, max_model_len=4096, max_num_seqs=32)
    with one_engine_gateway(small, "e1", policy={"name": "least_loaded"}) as gateway:
        ramp = Ramp(gateway.base_url)
        batch_threads = []
        for _ in range(24):  # about 700 KV tokens each: the 4096-token pool fills
            thread = threading.Thread(target=ramp.batch_request, daemon=True)
            thread.start()
            batch_threads.append(thread)
            time.sleep(0.25)
            ramp.interactive_request()
        for thread in batch_threads:
            thread.join(60)
    shed = [reason for status, reason in ramp.batch if status == 429]
    assert shed, ramp.batch
    assert set(shed) <= {"saturated", "reserved_for_higher_priority"}
    assert all(status in (200, 429) for status, _ in ramp.batch)
    statuses = [status for status, _ in ramp.interactive]
    ttfts = sorted(t for _, t in ramp.interactive if t is not None)
    assert statuses == [200] * 24
    assert ttfts[int(0.9 * len(ttfts)) - 1] <= 1.0  # the interactive class's TTFT target


def hold_stream(url: str, results: list[int], release: threading.Event) -> None:
    body = chat_body(max_tokens=2000, stream=True)
    with httpx.stream("POST", url, json=body, headers=AUTH, timeout=60) as response:
        chunks = response.iter_bytes()
        next(chunks, b"")
        results.append(response.status_code)
        release.wait(30)


def hold_slots(url: str, held: list[int], release: threading.Event) -> list[threading.Thread]:
    """Start two streams that each hold a concurrency slot until `release` (the endpoint's
    max_concurrency); returns once both hold theirs, each having added its status to `held`."""
    expected = len(held) + 2
    holders = [
        threading.Thread(target=hold_stream, args=(url, held, release), daemon=True)
        for _ in range(2)
    ]
    for thread in holders:
        thread.start()
    assert eventually(lambda: len(held) == expected)
    return holders


def test_a_non_sheddable_request_waits_for_capacity_then_misses_nothing() -> None:
    """At the concurrency limit an interactive request queues (not shed) and is dispatched when
    a slot frees; one whose TTFT deadline passes while waiting gets 503 deadline_unreachable."""
    with one_engine_gateway(
        endpoint_id="e1",
        endpoint_options={"max_concurrency": 2},
        admission={"queue_max_wait_s": 3.0},
    ) as gateway:
        url = gateway.base_url + "/v1/chat/completions"
        held: list[int] = []
        release = threading.Event()
        holders = hold_slots(url, held, release)
        threading.Timer(0.5, release.set).start()  # a slot frees after half a second
        started = time.perf_counter()
        queued = chat(gateway.base_url, "q")
        waited_s = time.perf_counter() - started
        for thread in holders:
            thread.join(30)
        release.clear()
        hold_slots(url, held, release)
        expired = chat(gateway.base_url, "late")
        batch = httpx.post(
            url, json=chat_body(max_tokens=4), headers=AUTH | {"x-slo-class": "batch"}
        )
        release.set()
    assert queued.status_code == 200 and waited_s >= 0.4
    assert expired.status_code == 503
    assert expired.headers["x-slo-gateway-reason"] == "deadline_unreachable"
    assert expired.json()["error"]["code"] == "deadline_unreachable"
    assert batch.status_code == 429  # sheddable: refused at once, never queued
    assert batch.headers["x-slo-gateway-reason"] == "saturated"

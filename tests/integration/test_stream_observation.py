"""A running stream teaches the gateway before it ends; a slowed engine is seen within seconds."""

from __future__ import annotations

import time
from typing import Any

import httpx
import openai
import pytest

from tests.fixtures.gateway import (
    ADMIN_KEY,
    PUBLIC_MODEL,
    TENANT_KEY,
    admin_endpoints,
    engine,
    eventually,
    gateway_over,
    one_engine_gateway,
    set_faults,
)

pytestmark = pytest.mark.integration
STATE = {"refresh_s": 0.05, "scrape_interval_s": 0.1}
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}


def estimate(base_url: str) -> dict[str, Any]:
    found: dict[str, Any] = admin_endpoints(base_url)["e"]["estimate"]
    return found


def stream(base_url: str, max_tokens: int) -> openai.Stream[Any]:
    client = openai.OpenAI(base_url=base_url + "/v1", api_key=TENANT_KEY, max_retries=0)
    return client.chat.completions.create(
        model=PUBLIC_MODEL,
        messages=[{"role": "user", "content": "tell me a long story"}],
        max_tokens=max_tokens,
        stream=True,
    )


def test_first_token_and_stretches_are_observed_while_the_stream_runs() -> None:
    with one_engine_gateway(engine(step_base_s=0.02), state=STATE) as gateway:
        chunks = stream(gateway.base_url, max_tokens=400)  # about 8 s of tokens
        next(iter(chunks))
        assert eventually(lambda: estimate(gateway.base_url)["samples"] == 1, 3.0)
        assert estimate(gateway.base_url)["ttft_mean_s"] > 0
        assert eventually(lambda: (estimate(gateway.base_url)["tpot_mean_s"] or 0) > 0, 3.0)
        running = estimate(gateway.base_url)
        assert running["e2e_mean_s"] is None  # nothing has finished
        for _ in chunks:
            pass
        assert eventually(lambda: estimate(gateway.base_url)["e2e_mean_s"] is not None)
        done = estimate(gateway.base_url)
        assert done["samples"] == 1  # counted once: at its first token
        assert done["tpot_mean_s"] == pytest.approx(0.02, rel=0.5)


def test_a_slowed_engine_is_detected_within_seconds_of_its_slow_tokens() -> None:
    with gateway_over(engine(step_base_s=0.02), state=STATE) as (gateway_url, engine_url):
        streams = [stream(gateway_url, max_tokens=600) for _ in range(4)]
        for chunks in streams:
            next(iter(chunks))
        time.sleep(3.0)  # the window learns the normal speed
        before = estimate(gateway_url)
        assert before["step_ratio"] == 1.0
        set_faults(engine_url, slowdown=3.0)
        slowed_at = time.monotonic()
        assert eventually(lambda: estimate(gateway_url)["step_ratio"] >= 1.5, 5.0)
        detected_s = time.monotonic() - slowed_at
        found = estimate(gateway_url)
        assert found["step_signal"] == "tpot"
        # the estimate jumped with it, at once (the window alone moves a few percent a second)
        assert found["tpot_mean_s"] >= 1.4 * before["tpot_mean_s"]
        assert detected_s < 4.0  # 2 s on an idle machine; the test shares 2 cores
        next(iter(stream(gateway_url, max_tokens=2)))  # decided while slowed
        decisions = httpx.get(gateway_url + "/admin/decisions", headers=ADMIN).json()
        assert decisions["decisions"][-1]["steps"]["e"]["signal"] == "tpot"
        for chunks in streams:
            chunks.close()

"""Admission by the routing prediction through real servers: a request that no endpoint can
serve within its SLO for load is refused at once with Retry-After; one too large for its
class even on an idle engine is served best effort (policies/admission.py, "By prediction")."""

from __future__ import annotations

import contextlib
import threading
import time

import anthropic
import httpx
import openai
import pytest

from tests.fixtures.gateway import (
    ENGINE_MODEL,
    PUBLIC_MODEL,
    TENANT_KEY,
    admin_endpoints,
    chat_body,
    counter_sum,
    engine,
    eventually,
    fleet_gateway,
)

pytestmark = pytest.mark.integration
SLO_AWARE = {"name": "slo_aware", "explore_fraction": 0.0, "estimate": {"min_samples": 5}}
TTFT_TARGET_S = 1.0  # the fixture's interactive class
# 0.1 ms of prefill per prompt token: the oversized prompt (about 17,000 tokens as the
# gateway counts them) takes 1.7 s alone, idle, and by the prior too (optimistically)
PREFILL = {"prefill_per_token_s": 0.0001, "prefill_quadratic_s": 0.0}


def prompt(tokens: int, tag: str) -> str:
    """Unique text of about `tokens` tokens (the engine caches prefixes)."""
    return tag + "w" * 4 * tokens


def flood(root_url: str, count: int) -> None:
    """Long answers sent straight to the engine, bypassing the gateway, to build its queue."""

    def one() -> None:
        body = chat_body("x", model=ENGINE_MODEL, max_tokens=400)
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(root_url + "/v1/chat/completions", json=body, timeout=60)

    for _ in range(count):
        threading.Thread(target=one, daemon=True).start()


def test_overload_is_refused_at_once_and_an_oversized_prompt_is_served_best_effort() -> None:
    slow = engine(max_num_seqs=2, max_model_len=24_000, **PREFILL)
    with fleet_gateway({"e": slow}, policy=SLO_AWARE) as (gateway, urls):
        client = openai.OpenAI(base_url=gateway.base_url + "/v1", api_key=TENANT_KEY, max_retries=0)
        for i in range(6):  # warm: 2,000-token prompts, about 0.25 s each
            stream = client.chat.completions.create(
                model=PUBLIC_MODEL,
                messages=[{"role": "user", "content": prompt(2000, f"{i:03d}")}],
                max_tokens=4,
                stream=True,
            )
            for _ in stream:
                pass
        oversized = client.chat.completions.with_raw_response.create(
            model=PUBLIC_MODEL,
            messages=[{"role": "user", "content": prompt(20_000, "big")}],
            max_tokens=4,
            stream=True,
        )
        answered = "".join(c.choices[0].delta.content or "" for c in oversized.parse() if c.choices)
        flood(urls["e"], count=12)

        def queue_seen() -> bool:
            signals = admin_endpoints(gateway.base_url)["e"]["engine"]
            return bool(signals and (signals["waiting"] or 0) >= 8)

        assert eventually(queue_seen)
        refusals: list[tuple[float, openai.APIStatusError]] = []
        for i in range(3):
            started = time.perf_counter()
            with pytest.raises(openai.APIStatusError) as refused:
                client.chat.completions.create(
                    model=PUBLIC_MODEL,
                    messages=[{"role": "user", "content": prompt(2000, f"late{i}")}],
                    max_tokens=4,
                )
            refusals.append((time.perf_counter() - started, refused.value))
        claude = anthropic.Anthropic(base_url=gateway.base_url, api_key=TENANT_KEY, max_retries=0)
        with pytest.raises(anthropic.APIStatusError) as messages_refused:
            claude.messages.create(
                model=PUBLIC_MODEL,
                messages=[{"role": "user", "content": prompt(2000, "messages")}],
                max_tokens=4,
            )
        metrics = httpx.get(gateway.base_url + "/metrics").text
    assert oversized.http_response.status_code == 200 and answered
    assert oversized.headers["x-slo-gateway-decision"] == "best_effort"
    assert counter_sum(metrics, "slo_gateway_best_effort_total", slo_class="interactive") == 1
    for elapsed_s, error in refusals:
        assert elapsed_s < TTFT_TARGET_S / 2  # at once: no wait that cannot succeed
        assert error.status_code == 503
        assert error.code == "overloaded"
        assert int(error.response.headers["retry-after"]) >= 1
    # the Messages API's own error shape
    messages_error = messages_refused.value
    assert messages_error.status_code == 503
    assert messages_error.response.json()["error"]["type"] == "overloaded_error"
    assert messages_error.response.headers["x-slo-gateway-reason"] == "overloaded"

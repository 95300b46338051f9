"""What the answer says about its decision: the class (also from the inference gateway's
objective header), a cold endpoint called cold, the binding target and its p95, and a reason
on every refusal."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.fixtures.gateway import (
    TENANT_KEY,
    TENANTS,
    chat_body,
    one_engine_gateway,
    runtime_of,
)

pytestmark = pytest.mark.integration
AUTH = {"authorization": f"Bearer {TENANT_KEY}"}


def test_a_cold_endpoint_is_called_cold_with_the_target_that_binds() -> None:
    classes = {
        "interactive": {"ttft_ms": 1000, "tpot_ms": 50, "priority": 10},
        "batch": {"deadline_ms": 60000, "sheddable": True},
    }
    hinted = TENANTS | {"acme": TENANTS["acme"] | {"slo_hints": True}}
    policy = {"name": "slo_aware"}
    with one_engine_gateway(
        endpoint_id="fresh", policy=policy, classes=classes, tenants=hinted
    ) as gw:
        answer = httpx.post(
            gw.base_url + "/v1/chat/completions",
            json=chat_body(max_tokens=2, stream=True),  # streamed: judged by TTFT and TPOT
            headers=AUTH | {"x-slo-tpot-ms": "40"},
        )
        batch = httpx.post(
            gw.base_url + "/v1/chat/completions",
            json=chat_body(max_tokens=2, stream=True),
            headers=AUTH | {"x-gateway-inference-objective": "batch"},
        )
    assert answer.status_code == 200
    headers = answer.headers
    assert headers["x-slo-gateway-decision"] == "cold"  # not slo_at_risk: nothing measured yet
    assert headers["x-slo-gateway-binding-target"] == "tpot"
    assert headers["x-slo-gateway-target-ms"] == "40"  # the hint tightened the class's 50
    assert int(headers["x-slo-gateway-judged-p95-ms"]) > 40
    assert "x-slo-gateway-predicted-ttft-p95-ms" in headers
    assert int(headers["x-slo-gateway-predicted-tpot-p95-ms"]) > 0
    assert batch.headers["x-slo-gateway-class"] == "batch"
    assert batch.headers["x-slo-gateway-binding-target"] == "deadline"


def test_no_endpoint_available_says_why_in_the_reason_header() -> None:
    with one_engine_gateway() as gw:
        runtime_of(gw).registry.cool_down("e", time.time() + 30, "test")
        answer = httpx.post(gw.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
        messages = httpx.post(
            gw.base_url + "/v1/messages",
            json={
                "model": chat_body()["model"],
                "max_tokens": 3,
                "messages": [{"role": "user", "content": "x"}],
            },
            headers={"x-api-key": TENANT_KEY},
        )
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "no_endpoint_available"
    assert answer.headers["x-slo-gateway-reason"] == "no_endpoint_available"
    assert int(answer.headers["retry-after"]) >= 1
    assert messages.status_code == 503 and messages.headers["x-slo-gateway-reason"]
    assert messages.json()["error"]["type"] == "overloaded_error"


def test_health_answers_like_healthz() -> None:
    with one_engine_gateway() as gw:
        assert (
            httpx.get(gw.base_url + "/health").json() == httpx.get(gw.base_url + "/healthz").json()
        )

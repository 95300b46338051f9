"""Fallback chains across public models (config `fallbacks`): a model with no endpoint in
rotation is served by the first of its fallbacks that has one, saying so."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.fixtures.gateway import (
    ADMIN_KEY,
    ENGINE_MODEL,
    PUBLIC_MODEL,
    TENANT_KEY,
    counter_sum,
    dead_upstream,
    engine,
    eventually,
    fleet_gateway,
    member,
)

pytestmark = pytest.mark.integration
BIG = "llama-70b"
HI = [{"role": "user", "content": "Hello"}]
SECTIONS = {
    "fallbacks": {BIG: [PUBLIC_MODEL]},
    "state": {"health_interval_s": 0.1, "breaker_failures": 1},
}


def test_a_model_out_of_rotation_is_served_by_its_fallback_on_both_apis() -> None:
    members = {"big": member(dead_upstream(), models={BIG: ENGINE_MODEL}), "small": engine()}
    with fleet_gateway(members, **SECTIONS) as (gateway, _):
        url = gateway.base_url

        def big_is_out() -> bool:
            return bool(httpx.get(url + "/readyz").json()["endpoints"]["big"] != "available")

        assert eventually(big_is_out)
        client = openai.OpenAI(base_url=url + "/v1", api_key=TENANT_KEY, max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model=BIG,
            messages=HI,  # type: ignore[arg-type]
            max_tokens=2,
        )
        claude = anthropic.Anthropic(base_url=url, api_key=TENANT_KEY, max_retries=0)
        message = claude.messages.with_raw_response.create(model=BIG, max_tokens=2, messages=HI)  # type: ignore[arg-type]
        metrics = httpx.get(url + "/metrics").text
        narrow = {"tenant": "acme", "allowed_models": [BIG]}
        admin = {"authorization": f"Bearer {ADMIN_KEY}"}
        key = httpx.post(url + "/admin/keys", json=narrow, headers=admin).json()["key"]
        only_big = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
        with pytest.raises(openai.APIStatusError) as refused:  # never a model it may not use
            only_big.chat.completions.create(model=BIG, messages=HI, max_tokens=2)  # type: ignore[arg-type]
    assert refused.value.status_code == 503
    assert raw.headers["x-slo-gateway-model"] == PUBLIC_MODEL
    assert raw.headers["x-slo-gateway-endpoint"] == "small"
    assert raw.parse().model == PUBLIC_MODEL
    assert message.headers["x-slo-gateway-model"] == PUBLIC_MODEL
    assert message.parse().model == PUBLIC_MODEL
    served = {"requested": BIG, "served": PUBLIC_MODEL}
    assert counter_sum(metrics, "slo_gateway_fallbacks_total", **served) == 2


def test_a_fallback_must_be_served_and_not_loop() -> None:
    from gateway.config.settings import ConfigError, parse_config
    from tests.fixtures.gateway import config, endpoint

    for chain in ({BIG: ["gpt-9"]}, {PUBLIC_MODEL: [PUBLIC_MODEL]}):
        data = config([endpoint("e", "http://127.0.0.1:9")], fallbacks=chain)
        with pytest.raises(ConfigError, match="fallbacks"):
            parse_config(data)

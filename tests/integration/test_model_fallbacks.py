"""Fallback chains across public models: a model with no endpoint in rotation, or whose
endpoints refuse the request, is served by the first of its `fallbacks` that can; a prompt that
does not fit a model's context window (estimated, or the engine's 400) by the first of its
`context_fallbacks`; each answer says so. A tenant's own limit never falls back."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion

from tests.fixtures.gateway import (
    ADMIN_KEY,
    ENGINE_MODEL,
    OTHER_TENANT_KEY,
    PUBLIC_MODEL,
    TENANT_KEY,
    Fleet,
    counter_sum,
    dead_upstream,
    engine,
    eventually,
    fleet_gateway,
    member,
    runtime_of,
    sim_stats,
    stream_held,
    tenants_with,
)

pytestmark = pytest.mark.integration
BIG = "llama-70b"
HI = [{"role": "user", "content": "Hello"}]
SECTIONS: dict[str, Any] = {
    "fallbacks": {BIG: [PUBLIC_MODEL]},
    "state": {"health_interval_s": 0.1, "breaker_failures": 1},
}


def test_a_model_out_of_rotation_is_served_by_its_fallback_on_both_apis() -> None:
    members: Fleet = {"big": member(dead_upstream(), models={BIG: ENGINE_MODEL}), "small": engine()}
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

    for section in ("fallbacks", "context_fallbacks"):
        for chain in ({BIG: ["gpt-9"]}, {PUBLIC_MODEL: [PUBLIC_MODEL]}):
            data = config([endpoint("e", "http://127.0.0.1:9")], **{section: chain})
            with pytest.raises(ConfigError, match=section):
                parse_config(data)


def test_a_refusal_falls_back_but_a_tenant_limit_does_not() -> None:
    """BIG's one endpoint is at its concurrency limit: a sheddable request for it, refused
    (saturated), is served by the fallback; a tenant's rate limit is answered as it is."""
    members: Fleet = {
        "big": member(engine(), models={BIG: ENGINE_MODEL}, max_concurrency=1),
        "small": engine(),
    }
    tenants = tenants_with(zeta={"limits": {"requests_per_min": 1}})
    with fleet_gateway(members, tenants=tenants, **SECTIONS) as (gateway, urls):
        url = gateway.base_url
        with stream_held(url, BIG):  # BIG's one slot taken
            batch = openai.OpenAI(base_url=url + "/v1", api_key=OTHER_TENANT_KEY, max_retries=0)
            raw = batch.chat.completions.with_raw_response.create(
                model=BIG,
                messages=HI,  # type: ignore[arg-type]
                max_tokens=2,
            )
            with pytest.raises(openai.RateLimitError) as limited:
                batch.chat.completions.create(model=BIG, messages=HI, max_tokens=2)  # type: ignore[arg-type]
            small_requests = sim_stats(urls["small"])["requests_received"]
            metrics = httpx.get(url + "/metrics").text
            admin = {"authorization": f"Bearer {ADMIN_KEY}"}
            decisions = httpx.get(url + "/admin/decisions", headers=admin).json()["decisions"]
    assert raw.headers["x-slo-gateway-model"] == PUBLIC_MODEL
    assert raw.headers["x-slo-gateway-requested-model"] == BIG
    assert raw.headers["x-slo-gateway-fallback"] == "refused"
    assert raw.parse().model == PUBLIC_MODEL
    assert limited.value.response.headers["x-slo-gateway-reason"] == "tenant_rate_limited"
    assert "x-slo-gateway-fallback" not in limited.value.response.headers
    assert small_requests == 1  # the limited request went nowhere
    refused = {"requested": BIG, "served": PUBLIC_MODEL, "reason": "refused"}
    assert counter_sum(metrics, "slo_gateway_fallbacks_total", **refused) == 1
    served = [d for d in decisions if d["requested_model"] == BIG and d["model"] == PUBLIC_MODEL]
    assert len(served) == 1


def test_a_budget_hold_is_priced_at_the_dearest_model_it_may_fall_back_to() -> None:
    """BIG is served free, its fallback dear: a request for BIG holds what the fallback would
    cost against the budget (here all of it), so while one runs a second is refused."""
    dear = {"input_per_1m": 1000.0, "output_per_1m": 1000.0}
    members: Fleet = {
        "big": member(engine(), models={BIG: ENGINE_MODEL}),
        "small": member(engine(), price=dear),
    }
    tenants = tenants_with(acme={"budget": {"usd_per_day": 0.01}})
    with fleet_gateway(members, tenants=tenants, **SECTIONS) as (gateway, _):
        url = gateway.base_url
        with stream_held(url, BIG):  # holds the whole budget, at the fallback's price
            client = openai.OpenAI(base_url=url + "/v1", api_key=TENANT_KEY, max_retries=0)
            with pytest.raises(openai.RateLimitError) as refused:
                client.chat.completions.create(model=BIG, messages=HI, max_tokens=2)  # type: ignore[arg-type]
    assert refused.value.response.headers["x-slo-gateway-reason"] == "tenant_budget_exceeded"


LONG = "llama-long"
WORDS = "word " * 2000  # about 2000 tokens: past a 256-token window, within 8192
CONTEXT = {PUBLIC_MODEL: [LONG]}


def long_chat(client: openai.OpenAI, model: str, text: str = WORDS) -> ChatCompletion:
    messages = [{"role": "user", "content": text}]
    return client.chat.completions.create(model=model, messages=messages, max_tokens=2)  # type: ignore[arg-type]


def test_a_prompt_too_long_by_estimate_goes_to_a_larger_context() -> None:
    """The small engine's window (256 tokens) is learnt from its /v1/models; a longer prompt
    never reaches it, and one too long for every model is a 400 in each API's shape."""
    members: Fleet = {
        "small": engine(max_model_len=256),
        "long": member(engine(), models={LONG: ENGINE_MODEL}),
    }
    with fleet_gateway(members, context_fallbacks=CONTEXT) as (gateway, urls):
        url = gateway.base_url
        registry = runtime_of(gateway).registry
        assert eventually(lambda: registry.window("small") == 256)
        client = openai.OpenAI(base_url=url + "/v1", api_key=TENANT_KEY, max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model=PUBLIC_MODEL,
            messages=[{"role": "user", "content": WORDS}],
            max_tokens=2,
        )
        claude = anthropic.Anthropic(base_url=url, api_key=TENANT_KEY, max_retries=0)
        message = claude.messages.create(
            model=PUBLIC_MODEL, max_tokens=2, messages=[{"role": "user", "content": WORDS}]
        )
        counted = claude.messages.with_raw_response.count_tokens(
            model=PUBLIC_MODEL, messages=[{"role": "user", "content": WORDS}]
        )
        with pytest.raises(openai.BadRequestError) as chat_refused:
            long_chat(client, LONG, WORDS * 5)
        with pytest.raises(anthropic.BadRequestError) as messages_refused:
            claude.messages.create(
                model=LONG, max_tokens=2, messages=[{"role": "user", "content": WORDS * 5}]
            )
        small_requests = sim_stats(urls["small"])["requests_received"]
        metrics = httpx.get(url + "/metrics").text
    assert raw.headers["x-slo-gateway-fallback"] == "context"
    assert raw.parse().model == LONG and message.model == LONG
    assert small_requests == 0
    assert counted.headers["x-slo-gateway-model"] == PUBLIC_MODEL  # no window limits a count
    assert counted.parse().input_tokens > 256
    context = {"requested": PUBLIC_MODEL, "served": LONG, "reason": "context"}
    assert counter_sum(metrics, "slo_gateway_fallbacks_total", **context) == 2
    assert chat_refused.value.code == "context_length_exceeded"
    assert messages_refused.value.status_code == 400
    body = messages_refused.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "context window" in body["error"]["message"]


def test_an_engines_context_refusal_goes_to_a_larger_context_or_is_a_400() -> None:
    """An endpoint whose window the gateway cannot know (a provider's /v1/models does not say)
    answers 400: the request goes on to the context fallback, on both APIs; for a key that may
    not use the fallback, the client gets a 400 context_length_exceeded, never a 5xx."""
    apis = ["chat", "messages"]
    small = member(
        engine(max_model_len=256), "openai", models={PUBLIC_MODEL: ENGINE_MODEL}, apis=apis
    )
    members: Fleet = {"small": small, "long": member(engine(), models={LONG: ENGINE_MODEL})}
    with fleet_gateway(members, context_fallbacks=CONTEXT) as (gateway, urls):
        url = gateway.base_url
        client = openai.OpenAI(base_url=url + "/v1", api_key=TENANT_KEY, max_retries=0)
        chat = long_chat(client, PUBLIC_MODEL)
        stream = client.chat.completions.create(
            model=PUBLIC_MODEL,
            messages=[{"role": "user", "content": WORDS}],
            max_tokens=2,
            stream=True,
        )
        streamed = {chunk.model for chunk in stream}
        claude = anthropic.Anthropic(base_url=url, api_key=TENANT_KEY, max_retries=0)
        message = claude.messages.with_raw_response.create(
            model=PUBLIC_MODEL, max_tokens=2, messages=[{"role": "user", "content": WORDS}]
        )
        narrow = {"tenant": "acme", "allowed_models": [PUBLIC_MODEL]}
        admin = {"authorization": f"Bearer {ADMIN_KEY}"}
        key = httpx.post(url + "/admin/keys", json=narrow, headers=admin).json()["key"]
        only_small = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
        with pytest.raises(openai.BadRequestError) as refused:
            long_chat(only_small, PUBLIC_MODEL)
        small_requests = sim_stats(urls["small"])["requests_received"]
    assert chat.model == LONG and streamed == {LONG}
    assert message.headers["x-slo-gateway-fallback"] == "context"
    assert message.parse().model == LONG
    assert small_requests == 4  # each tried the small engine first
    assert refused.value.code == "context_length_exceeded"

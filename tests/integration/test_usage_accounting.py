"""Usage accounting end to end, through a real gateway over simulated engines and providers:
token limits settled on real usage, limit headers, budgets (injected clock), /admin/usage and
the usage counters."""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest
from anthropic import Anthropic
from openai import OpenAI, RateLimitError
from openai.types.chat import ChatCompletionMessageParam

from gateway.config.settings import Price, parse_config
from gateway.core import tokens
from gateway.core.accounting import cost_pusd
from tests.fixtures.gateway import (
    ADMIN_KEY,
    OTHER_TENANT_KEY,
    PUBLIC_MODEL,
    TENANT_KEY,
    chat_body,
    counter_sum,
    engine,
    fleet_gateway,
    member,
    one_engine_config,
    one_engine_gateway,
    provider,
    running_gateway,
    runtime_of,
    tenants_with,
)

pytestmark = pytest.mark.integration
PRICE = {"input_per_1m": 0.5, "output_per_1m": 1.5, "cached_input_per_1m": 0.05}
PRICED: dict[str, Any] = {"endpoint_id": "e1", "endpoint_options": {"price": PRICE}}
MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Tell me about tokens please"}
]


@pytest.fixture(scope="module")
def gateway() -> Iterator[str]:
    """One engine and one provider behind a gateway; acme has request and token limits."""
    members = {"e1": member(engine(), price=PRICE), "p1": member(provider(), price=PRICE)}
    limits = {"tokens_per_min": 100_000, "requests_per_min": 1000}
    with fleet_gateway(members, tenants=tenants_with(acme={"limits": limits})) as (server, _):
        yield server.base_url


def client(base_url: str, key: str = TENANT_KEY) -> OpenAI:
    return OpenAI(base_url=base_url + "/v1", api_key=key, max_retries=0)


def reserved(body: dict[str, Any]) -> int:
    """The prompt estimate and max_tokens, else the expected output (admission's default)."""
    return tokens.estimate_prompt_tokens(body) + int(body.get("max_tokens", 256))


def remaining(headers: Mapping[str, str]) -> int:
    return int(headers["x-ratelimit-remaining-tokens"])


def test_token_window_holds_real_usage_whatever_the_estimate(gateway: str) -> None:
    """Each answer's remaining tokens = limit - what earlier requests really used - its own
    reservation: the one without max_tokens reserved 256 and is charged its completion, a stream
    with usage settles on it, one without settles on the tokens counted."""
    sdk, used = client(gateway), None
    cases: list[dict[str, Any]] = [
        {},  # no max_tokens: 256 reserved, the engine writes 64
        {"max_tokens": 40},
        {"max_tokens": 30, "stream": True, "stream_options": {"include_usage": True}},
        {"max_tokens": 20, "stream": True},  # no usage: settled on the tokens streamed
    ]
    for extra in cases:
        body = {"model": PUBLIC_MODEL, "messages": MESSAGES} | extra
        raw = sdk.chat.completions.with_raw_response.create(**body)
        if used is None:  # the window may hold other tests' requests: start from here
            used = 100_000 - remaining(raw.headers) - reserved(body)
        assert remaining(raw.headers) == 100_000 - used - reserved(body)
        parsed: Any = raw.parse()
        if extra.get("stream"):
            chunks = list(parsed)
            reported = [c.usage for c in chunks if c.usage is not None]
            if reported:
                used += reported[0].prompt_tokens + reported[0].completion_tokens
            else:  # settled on the estimate of the prompt and the content chunks counted
                used += tokens.estimate_prompt_tokens(body) + sum(
                    1 for c in chunks if c.choices and c.choices[0].delta.content
                )
        else:
            assert parsed.usage is not None
            used += parsed.usage.prompt_tokens + parsed.usage.completion_tokens
    assert raw.headers["x-ratelimit-limit-tokens"] == "100000"
    assert raw.headers["x-ratelimit-limit-requests"] == "1000"
    assert raw.headers["x-ratelimit-reset-tokens"].endswith("s")


def test_limit_headers_count_down_and_come_on_refusals(gateway: str) -> None:
    """Requests left counts down by one per request; a tenant without limits gets none."""
    sdk = client(gateway)
    body = chat_body(max_tokens=2)
    first = sdk.chat.completions.with_raw_response.create(**body).headers
    second = sdk.chat.completions.with_raw_response.create(**body).headers
    left = int(first["x-ratelimit-remaining-requests"])
    assert int(second["x-ratelimit-remaining-requests"]) == left - 1
    assert first["x-ratelimit-reset-requests"] not in ("", "0s")
    # A refusal (over the tokens limit) carries them too.
    refused = httpx.post(
        gateway + "/v1/chat/completions",
        json=chat_body(max_tokens=99_999, content="x" * 40_000),
        headers={"authorization": f"Bearer {TENANT_KEY}"},
    )
    assert refused.status_code == 429
    assert refused.headers["x-slo-gateway-reason"] == "tenant_token_limited"
    # The refusal counted nothing: as many requests left as after the second.
    assert int(refused.headers["x-ratelimit-remaining-requests"]) == left - 1
    other = client(gateway, OTHER_TENANT_KEY).chat.completions.with_raw_response.create(**body)
    assert "x-ratelimit-limit-requests" not in other.headers


def test_admin_usage_groups_and_prices_what_was_used(gateway: str) -> None:
    """zeta's requests (it has no limits: accounted all the same), by model and endpoint, with
    the cached prompt tokens of a repeated long prompt billed at the cached rate. Round robin
    sends two to each endpoint, and both report the second's prompt as cached."""
    sdk = client(gateway, OTHER_TENANT_KEY)
    before = zeta_totals(gateway)
    long_prompt = "All work and no play makes a dull model. " * 400  # ~4000 tokens: cacheable
    answers = [
        sdk.chat.completions.create(
            model=PUBLIC_MODEL,
            messages=[{"role": "user", "content": long_prompt}],
            max_tokens=5,
        )
        for _ in range(4)
    ]
    sums = {"prompt": 0, "cached": 0, "completion": 0, "cost": 0}
    price = Price(**PRICE)
    for answer in answers:
        usage = answer.usage
        assert usage is not None
        details = usage.prompt_tokens_details
        cached = (details.cached_tokens or 0) if details else 0
        sums["prompt"] += usage.prompt_tokens
        sums["cached"] += cached
        sums["completion"] += usage.completion_tokens
        sums["cost"] += cost_pusd(price, usage.prompt_tokens, cached, usage.completion_tokens)
    assert sums["cached"] > 0, "the provider's prompt cache never hit"
    zeta = zeta_groups(gateway)
    assert {g["endpoint"] for g in zeta} == {"e1", "p1"}
    assert {g["model"] for g in zeta} == {PUBLIC_MODEL}
    total = {k: v - before.get(k, 0) for k, v in zeta_totals(gateway).items()}
    assert (total["prompt_tokens"], total["cached_tokens"], total["completion_tokens"]) == (
        sums["prompt"],
        sums["cached"],
        sums["completion"],
    )
    assert (total["cost_pusd"], total["requests"]) == (sums["cost"], 4)
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    exported = httpx.get(gateway + "/admin/usage.csv", params={"group_by": "tenant"}, headers=admin)
    rows = {r["tenant"]: r for r in csv.DictReader(io.StringIO(exported.text))}
    assert int(rows["zeta"]["prompt_tokens"]) == sum(g["prompt_tokens"] for g in zeta)
    assert float(rows["zeta"]["cost_usd"]) == pytest.approx(sum(g["cost_usd"] for g in zeta))
    metrics = httpx.get(gateway + "/metrics").text
    after = zeta_totals(gateway)  # the counters count what the buckets hold
    cached_total = counter_sum(
        metrics, "slo_gateway_usage_tokens_total", tenant="zeta", kind="cached"
    )
    assert cached_total == after["cached_tokens"]
    cost = counter_sum(metrics, "slo_gateway_usage_cost_usd_total", tenant="zeta")
    assert cost == pytest.approx(after["cost_pusd"] / 1e12)
    requests = counter_sum(metrics, "slo_gateway_usage_requests_total", tenant="zeta")
    assert requests == after["requests"]


def zeta_groups(gateway: str) -> list[dict[str, Any]]:
    view = httpx.get(
        gateway + "/admin/usage",
        params={"group_by": "tenant,model,endpoint"},
        headers={"authorization": f"Bearer {ADMIN_KEY}"},
    )
    assert view.status_code == 200, view.text
    return [g for g in view.json()["groups"] if g["tenant"] == "zeta"]


def zeta_totals(gateway: str) -> dict[str, int]:
    numbers = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens", "cost_pusd")
    return {k: sum(g[k] for g in zeta_groups(gateway)) for k in numbers}


@pytest.mark.parametrize(
    ("key", "params", "status", "param"),
    [
        (None, {}, 401, None),
        (TENANT_KEY, {}, 401, None),
        (ADMIN_KEY, {"since": "yesterday"}, 400, "since"),
        (ADMIN_KEY, {"group_by": "tenant,colour"}, 400, "group_by"),
        (ADMIN_KEY, {"since": "2030-01-02T00:00:00Z", "until": "2030-01-01"}, 400, "since"),
        (ADMIN_KEY, {"format": "xml"}, 400, "format"),
    ],
)
def test_admin_usage_is_admin_only_and_validates_its_query(
    gateway: str, key: str | None, params: dict[str, str], status: int, param: str | None
) -> None:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    answer = httpx.get(gateway + "/admin/usage", params=params, headers=headers)
    assert answer.status_code == status
    error = answer.json()["error"]
    assert error["param"] == param and error["message"]


def test_anthropic_route_gets_headers_and_its_own_error_shape() -> None:
    with one_engine_gateway(
        endpoint_id="e1",
        endpoint_options={"apis": ["chat", "messages"]},
        tenants=tenants_with(acme={"limits": {"requests_per_min": 1}}),
    ) as server:
        sdk = Anthropic(base_url=server.base_url, api_key=TENANT_KEY, max_retries=0)
        first = sdk.messages.with_raw_response.create(
            model=PUBLIC_MODEL, max_tokens=5, messages=[{"role": "user", "content": "hi"}]
        )
        assert first.headers["x-ratelimit-remaining-requests"] == "0"
        refused = httpx.post(
            server.base_url + "/v1/messages",
            json={"model": PUBLIC_MODEL, "max_tokens": 5, "messages": MESSAGES},
            headers={"x-api-key": TENANT_KEY},
        )
    assert refused.status_code == 429
    assert refused.json()["type"] == "error"
    assert refused.json()["error"]["type"] == "rate_limit_error"
    assert refused.headers["x-ratelimit-limit-requests"] == "1"


def test_openai_sdk_sees_a_refusal_as_rate_limit_error(gateway: str) -> None:
    sdk = client(gateway)
    sdk.chat.completions.create(model=PUBLIC_MODEL, messages=MESSAGES, max_tokens=2)
    with pytest.raises(RateLimitError) as refused:
        sdk.chat.completions.create(
            model=PUBLIC_MODEL, messages=MESSAGES, max_tokens=150_000
        )  # bigger than the window: capped at the limit, refused only because it is not empty
    assert refused.value.code == "tenant_token_limited"


def test_budget_refuses_with_retry_after_until_midnight_and_alerts_once() -> None:
    budget = {"usd_per_day": 0.000001, "soft_alert_fraction": 0.5}
    with one_engine_gateway(**PRICED, tenants=tenants_with(acme={"budget": budget})) as server:
        sdk = client(server.base_url)
        sdk.chat.completions.create(model=PUBLIC_MODEL, messages=MESSAGES, max_tokens=3)
        with pytest.raises(RateLimitError) as refused:
            sdk.chat.completions.create(model=PUBLIC_MODEL, messages=MESSAGES, max_tokens=3)
        metrics = httpx.get(server.base_url + "/metrics").text
    error = refused.value
    assert error.code == "tenant_budget_exceeded"
    assert error.type == "rate_limit_error"
    now = time.time()
    until_midnight = (math.floor(now / 86400) + 1) * 86400 - now
    assert abs(int(error.response.headers["retry-after"]) - until_midnight) <= 5
    assert counter_sum(metrics, "slo_gateway_budget_alerts_total", tenant="acme") == 1


def test_a_budget_applies_on_reload() -> None:
    with one_engine_config(**PRICED) as data, running_gateway(data) as server:
        sdk = client(server.base_url)
        for _ in range(2):  # no budget: both served
            sdk.chat.completions.create(model=PUBLIC_MODEL, messages=MESSAGES, max_tokens=2)
        budgeted = data | {"tenants": tenants_with(acme={"budget": {"usd_per_day": 1e-6}})}
        runtime_of(server).apply(parse_config(budgeted, "test"))
        with pytest.raises(RateLimitError) as refused:  # the day's spend is already over
            sdk.chat.completions.create(model=PUBLIC_MODEL, messages=MESSAGES, max_tokens=2)
    assert refused.value.code == "tenant_budget_exceeded"

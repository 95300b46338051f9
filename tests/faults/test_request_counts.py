"""`slo_gateway_requests_total` counts every API request once, with its outcome, whatever
happened to it: served, refused by admission (with the reason), the client's fault, failed
upstream before the first byte or mid-stream. Across two replicas sharing Redis, a burst against
a tenant's limit lets exactly the limit through, and the two replicas' counters add up to the
burst."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.faults.upstreams import ScriptedUpstream, echo_secrets, serving
from tests.fixtures.gateway import (
    OTHER_TENANT_KEY,
    TENANT_KEY,
    Fleet,
    chat_body,
    counter_sum,
    dead_upstream,
    engine,
    fleet_gateway,
    member,
    one_engine_config,
    tenants_with,
)
from tests.fixtures.processes import two_replicas

pytestmark = pytest.mark.integration
ACME = {"authorization": f"Bearer {TENANT_KEY}"}
ZETA = {"authorization": f"Bearer {OTHER_TENANT_KEY}"}
OUTCOMES = ("ok", "client_error", "rejected", "upstream_error", "cancelled", "error")


def zeta_limited(requests_per_min: int) -> dict[str, dict[str, Any]]:
    return tenants_with(zeta={"limits": {"requests_per_min": requests_per_min}})


def send_everything(base_url: str) -> Counter[str]:
    """One request of each kind; returns the outcome each should be counted with."""
    url = base_url + "/v1/chat/completions"
    sent: list[tuple[str, httpx.Response]] = []

    def post(outcome: str, **kwargs: Any) -> None:
        sent.append((outcome, httpx.post(url, timeout=20, **kwargs)))

    for _ in range(3):
        post("ok", json=chat_body(max_tokens=2), headers=ACME)
    post("client_error", json=chat_body(), headers={"authorization": "Bearer sk-wrong"})
    post("client_error", json=chat_body(model="no-such-model"), headers=ACME)
    post("client_error", content=b"{not json", headers=ACME)
    post("client_error", json=chat_body(), headers=ZETA | {"x-slo-class": "interactive"})
    for outcome in ("ok", "ok", "rejected", "rejected"):  # zeta's limit is 2 a minute
        post(outcome, json=chat_body(max_tokens=2), headers=ZETA)
    post("upstream_error", json=chat_body(model="dead-model"), headers=ACME)
    cut = chat_body("cut-mid-line", model="echo-model", stream=True)
    post("upstream_error", json=cut, headers=ACME)
    models = httpx.get(base_url + "/v1/models")  # no key: 401
    sent.append(("client_error", models))
    statuses = [response.status_code for _, response in sent]
    assert statuses == [200] * 3 + [401, 404, 400, 403, 200, 200, 429, 429, 502, 200, 401]
    return Counter(outcome for outcome, _ in sent)


def test_every_api_request_is_counted_once_with_its_outcome() -> None:
    with serving(ScriptedUpstream(echo_secrets)) as echo_url:
        members: Fleet = {
            "e": engine(),
            "dead": member(dead_upstream(), models={"dead-model": "m"}),
            "echo": member(echo_url, models={"echo-model": "m"}),
        }
        state = {"breaker_failures": 20}
        with fleet_gateway(members, state=state, tenants=zeta_limited(2)) as (gateway, _):
            expected = send_everything(gateway.base_url)
            httpx.get(gateway.base_url + "/healthz")  # not an API request: not counted
            metrics = httpx.get(gateway.base_url + "/metrics").text
    counted = {o: counter_sum(metrics, "slo_gateway_requests_total", outcome=o) for o in OUTCOMES}
    assert counted == {o: float(expected[o]) for o in OUTCOMES}
    rejected = counter_sum(metrics, "slo_gateway_requests_total", reason="tenant_rate_limited")
    assert rejected == 2
    assert counter_sum(metrics, "slo_gateway_requests_total", tenant="zeta", outcome="ok") == 2


@pytest.mark.redis
@pytest.mark.slow
def test_a_burst_on_two_replicas_gets_exactly_the_limit_and_both_count_it(
    redis_url: str, key_prefix: str, tmp_path: Path
) -> None:
    # A generous Redis timeout: on a loaded machine a slow answer would send a replica to
    # its own memory (by design), and the limit would then hold per replica, not in total.
    state = {"redis_timeout_s": 2.0}
    with (
        one_engine_config(endpoint_id="e1", state=state, tenants=zeta_limited(5)) as data,
        two_replicas(data, tmp_path, redis_url, key_prefix) as (a, b),
    ):
        urls = [g.base_url + "/v1/chat/completions" for g in (a, b) for _ in range(8)]
        with ThreadPoolExecutor(16) as pool:
            statuses = list(
                pool.map(
                    lambda url: (
                        httpx.post(
                            url, json=chat_body(max_tokens=2), headers=ZETA, timeout=20
                        ).status_code
                    ),
                    urls,
                )
            )
        scraped = [httpx.get(g.base_url + "/metrics").text for g in (a, b)]
    assert sorted(statuses) == [200] * 5 + [429] * 11
    for outcome, count in (("ok", 5), ("rejected", 11)):
        total = sum(counter_sum(m, "slo_gateway_requests_total", outcome=outcome) for m in scraped)
        assert total == count, outcome

"""The usage counters: what a request adds reaches Prometheus, exactly, when anything reads."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import generate_latest

from gateway.telemetry import usage_counters
from gateway.telemetry.metrics import Metrics
from tests.fixtures.gateway import counter_sum

ACME = ("acme", "interactive", "chat-small", "vllm-a")
ZETA = ("zeta", "batch", "chat-small", "provider-b")


def scraped(metrics: Metrics) -> str:
    metrics.usage.flush()  # as /metrics and the dashboard do before reading
    return generate_latest(metrics.registry).decode()


def test_a_read_after_flush_shows_every_request_added() -> None:
    metrics = Metrics()
    metrics.usage.add(ACME, 100, 40, 10, 0.25)
    metrics.usage.add(ACME, 50, 0, 5, 0.5)
    metrics.usage.add(ZETA, 7, 0, 3, 0.125)
    text = scraped(metrics)
    assert counter_sum(text, "slo_gateway_usage_requests_total", tenant="acme") == 2
    assert counter_sum(text, "slo_gateway_usage_tokens_total", tenant="acme", kind="prompt") == 150
    assert counter_sum(text, "slo_gateway_usage_tokens_total", tenant="acme", kind="cached") == 40
    tokens = counter_sum(text, "slo_gateway_usage_tokens_total", tenant="acme", kind="completion")
    assert tokens == 15
    assert counter_sum(text, "slo_gateway_usage_cost_usd_total", tenant="acme") == 0.75
    assert counter_sum(text, "slo_gateway_usage_requests_total", tenant="zeta") == 1


def test_flushes_add_up_and_a_flush_with_nothing_pending_changes_nothing() -> None:
    metrics = Metrics()
    metrics.usage.add(ACME, 10, 0, 1, 0.5)
    scraped(metrics)
    metrics.usage.add(ACME, 10, 0, 1, 0.25)
    scraped(metrics)
    text = scraped(metrics)
    assert counter_sum(text, "slo_gateway_usage_requests_total", tenant="acme") == 2
    assert counter_sum(text, "slo_gateway_usage_cost_usd_total", tenant="acme") == 0.75


async def test_the_background_flush_hands_pending_amounts_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(usage_counters, "FLUSH_EVERY_S", 0.01)
    metrics = Metrics()
    metrics.usage.add(ACME, 10, 0, 1, 0.5)
    task = asyncio.create_task(metrics.usage.run())
    try:
        for _ in range(200):  # without flushing here: only the background task can
            text = generate_latest(metrics.registry).decode()
            if counter_sum(text, "slo_gateway_usage_requests_total", tenant="acme") == 1:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the background flush never ran")
    finally:
        task.cancel()


async def test_stopping_the_background_flush_hands_on_what_is_pending() -> None:
    """A worker's runtime cancels the loop at shutdown: its last requests must not be lost."""
    metrics = Metrics()
    task = asyncio.create_task(metrics.usage.run())
    await asyncio.sleep(0)  # the loop is sleeping before its first flush
    metrics.usage.add(ACME, 10, 0, 1, 0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    text = generate_latest(metrics.registry).decode()  # no flush here: the loop's own
    assert counter_sum(text, "slo_gateway_usage_requests_total", tenant="acme") == 1

"""The usage counters (`slo_gateway_usage_*`, gateway/telemetry/metrics.py), added up per request
in plain numbers and handed to Prometheus in batches.

Five Prometheus increments per request (requests, three token kinds, cost) cost more than the
rest of its accounting: each is four Python calls and a lock. So a request adds to its group's
pending amounts, and `flush` hands each group's sums to its counters at once. Whatever reads
the counters flushes first (/metrics, the dashboard), so one process always shows every
request it finished. Under `serve --workers N` a worker's counters reach the shared files when
it flushes: at its own reads, and every `FLUSH_EVERY_S` in the background (`run`), so another
worker's scrape can be that much behind (a worker that stops flushes first).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

FLUSH_EVERY_S = 1.0
Labels = tuple[str, str, str, str]  # tenant, slo_class, public model, endpoint


async def flush_every(flush: Callable[[], None]) -> None:
    """Call `flush` every FLUSH_EVERY_S until cancelled, and once more then: the loop behind
    each batch of usage (these counters; the memory store's settlements,
    gateway/server/admission_queue.py)."""
    try:
        while True:
            await asyncio.sleep(FLUSH_EVERY_S)
            flush()
    finally:
        flush()


class UsageCounters:
    def __init__(self, requests: Any, tokens: Any, cost: Any) -> None:
        """The three Prometheus counters: requests, tokens (by kind), cost in USD."""
        self._counters = (requests, tokens, cost)
        # per group: requests, prompt, cached and completion tokens, cost in USD
        self._pending: dict[Labels, list[float]] = {}
        self._series: dict[Labels, tuple[Any, ...]] = {}

    def add(self, labels: Labels, prompt: int, cached: int, completion: int, usd: float) -> None:
        amounts = self._pending.get(labels)
        if amounts is None:
            self._pending[labels] = [1, prompt, cached, completion, usd]
            return
        amounts[0] += 1
        amounts[1] += prompt
        amounts[2] += cached
        amounts[3] += completion
        amounts[4] += usd

    def flush(self) -> None:
        """Every pending amount into its counter."""
        pending, self._pending = self._pending, {}
        for labels, amounts in pending.items():
            series = self._series.get(labels) or self._children(labels)
            for child, amount in zip(series, amounts, strict=True):
                child.inc(amount)

    async def run(self) -> None:
        """The background flush, owned by the runtime; its cancellation at shutdown flushes
        once more, so a worker that stops leaves its last requests in the shared files."""
        await flush_every(self.flush)

    def _children(self, labels: Labels) -> tuple[Any, ...]:
        """A group's five series, looked up once per group."""
        requests, tokens, cost = self._counters
        series = (
            requests.labels(*labels),
            tokens.labels(*labels, "prompt"),
            tokens.labels(*labels, "cached"),
            tokens.labels(*labels, "completion"),
            cost.labels(*labels),
        )
        self._series[labels] = series
        return series

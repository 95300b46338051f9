"""A bounded ring of recent samples: the sparklines and the "last 5 minutes" counts.

A task owned by the app lifespan takes one `Sample` (gateway/dashboard/readings.py) every
`interval_s` (GATEWAY_DASHBOARD_SAMPLE_S, default 2 s). The ring holds `SPAN_S` worth of them, so
its memory is fixed (150 samples at the default interval); windowed counts are the current
totals minus those of the oldest sample.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from gateway.server.dashboard.readings import SERIES, Sample, sample
from gateway.server.runtime import Runtime
from gateway.telemetry.metrics import log

SPAN_S = 300.0
MIN_AXIS_S = 60.0


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 5)


class History:
    def __init__(self, interval_s: float, span_s: float = SPAN_S) -> None:
        self.interval_s = interval_s
        self.span_s = span_s
        self.samples: deque[Sample] = deque(maxlen=max(2, round(span_s / interval_s)))

    def add(self, item: Sample) -> None:
        self.samples.append(item)

    def oldest(self) -> Sample | None:
        return self.samples[0] if self.samples else None

    def series(self, endpoint_id: str) -> dict[str, list[Any]]:
        """Per endpoint: `at_s` and one list per Point field, oldest first."""
        kept = [s for s in self.samples if endpoint_id in s.points]
        series: dict[str, list[Any]] = {"at_s": [round(s.at_s, 3) for s in kept]}
        for name in SERIES:
            series[name] = [_round(getattr(s.points[endpoint_id], name)) for s in kept]
        return series

    def axis_s(self, now_s: float) -> float:
        """The sparklines' time axis: the ring's span once full, at least `MIN_AXIS_S` before."""
        oldest = self.oldest()
        held_s = now_s - oldest.at_s if oldest else 0.0
        return min(self.span_s, max(MIN_AXIS_S, held_s))

    async def run(self, take: Callable[[], Sample]) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                self.add(take())
            except (KeyError, ValueError, ArithmeticError) as exc:
                # A reload can swap the config between reads; the next sample will be whole.
                log.warning("dashboard sample skipped: %r", exc)


def watch(runtime: Runtime, interval_s: float) -> History:
    """The ring and its sampling task, which joins the runtime's tasks (`close` stops it)."""
    history = History(interval_s)
    history.add(sample(runtime))
    runtime.tasks.append(asyncio.create_task(history.run(lambda: sample(runtime))))
    return history

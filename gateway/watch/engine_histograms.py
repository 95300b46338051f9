"""Engine latency histograms (TTFT, inter-token, queue time): what the last seconds added.

Histograms are cumulative since the engine started, so only a difference says anything about
now: between the scrape at the start of the scraper's rate window and the latest one, the
added count and sum give the mean, the added bucket counts an approximate p95 (linear within
the bucket that holds it; vLLM's buckets are wide, 0.1 -> 0.25 -> 0.5 s for TTFT, so this is a
cross-check of the gateway's own estimate, not a replacement: docs/observability.md). A count
that went down (an engine restart) or no new observation gives None. Several series (the
data-parallel `engine` label, several models) are summed bucket by bucket.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from gateway.watch.engine_names import Found


class EngineHistogram(NamedTuple):
    observed: float  # how many observations (the `_count` series)
    sum_s: float
    buckets: tuple[tuple[float, float], ...]  # (upper bound, cumulative count), by bound


def read_histogram(base_names: Sequence[str], found: Found) -> EngineHistogram | None:
    """The first of `base_names` the page carries, its series summed."""
    for name in base_names:
        counts = found.get(name + "_count")
        if not counts:
            continue
        by_bound: dict[float, float] = {}
        for labels, value in found.get(name + "_bucket", ()):
            bound = _bound(labels.get("le"))
            if bound is not None:
                by_bound[bound] = by_bound.get(bound, 0.0) + value
        total_s = sum(value for _, value in found.get(name + "_sum", ()))
        return EngineHistogram(sum(v for _, v in counts), total_s, tuple(sorted(by_bound.items())))
    return None


def _bound(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def recent(
    now: EngineHistogram | None, before: EngineHistogram | None
) -> tuple[float | None, float | None]:
    """(mean, p95) of the observations between `before` and `now`; None when unknown."""
    if now is None or before is None:
        return None, None
    added = now.observed - before.observed
    if added <= 0 or now.sum_s < before.sum_s:
        return None, None
    return (now.sum_s - before.sum_s) / added, _p95(now, before, added)


def _cumulative_at(histogram: EngineHistogram, bound: float) -> float:
    """The count at or below `bound` (by the largest bound not above it)."""
    return max((count for b, count in histogram.buckets if b <= bound), default=0.0)


def _p95(now: EngineHistogram, before: EngineHistogram, added: float) -> float | None:
    rank, lower, below = 0.95 * added, 0.0, 0.0
    for bound, cumulative in now.buckets:
        within = cumulative - _cumulative_at(before, bound)
        if within >= rank:
            if math.isinf(bound):
                return lower  # beyond the last finite bound: the bound is all we know
            share = (rank - below) / (within - below) if within > below else 1.0
            return lower + (bound - lower) * share
        lower, below = bound, within
    return None

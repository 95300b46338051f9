"""One measurement: a phase (a load shape) against one system, with CPU read before and after.

    open50    non-streamed, open loop at 50 req/s        -> added latency p50/p99
    open200   non-streamed, open loop at 200 req/s       -> added latency p50/p99, CPU per request
    ttft50    streamed, open loop at 50 req/s            -> added TTFT
    closed64  non-streamed, 64 in flight                 -> max req/s per proxy core
    stream64  streamed, 64 in flight                     -> relayed tokens/s per proxy core

Before each measurement the client drops its idle connections (a relay may have closed them
while other systems ran) and warms up with the phase's own shape, so neither pool is cold.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from benchmarks.relay.load import CallResult, SystemUnderTest, Tally, closed_loop, open_loop
from benchmarks.relay.procs import self_cpu_s
from gateway.bench.percentile import percentile

WARM_CONCURRENCY = 16


@dataclass(frozen=True, slots=True)
class Phase:
    name: str
    stream: bool
    rate_per_s: float | None = None  # open loop when set, else closed loop
    concurrency: int = 64

    async def drive(self, target: SystemUnderTest, duration_s: float) -> Tally:
        if self.rate_per_s is not None:
            return await open_loop(target, self.rate_per_s, duration_s, self.stream)
        return await closed_loop(target, self.concurrency, duration_s, self.stream)

    async def warm(self, target: SystemUnderTest, duration_s: float) -> None:
        concurrency = WARM_CONCURRENCY if self.rate_per_s is not None else self.concurrency
        await closed_loop(target, concurrency, duration_s, self.stream)


PHASES = (
    Phase("open50", stream=False, rate_per_s=50),
    Phase("open200", stream=False, rate_per_s=200),
    Phase("ttft50", stream=True, rate_per_s=50),
    Phase("closed64", stream=False),
    Phase("stream64", stream=True),
)

CpuReader = Callable[[], Mapping[str, float]]  # process role -> CPU seconds so far


async def measure_phase(
    target: SystemUnderTest, phase: Phase, duration_s: float, warm_s: float, cpu: CpuReader
) -> dict[str, Any]:
    target.close()
    await phase.warm(target, warm_s)
    before = {**cpu(), "loadgen": self_cpu_s()}
    tally = await phase.drive(target, duration_s)
    after = {**cpu(), "loadgen": self_cpu_s()}
    spent = {f"{role}_cpu_s": round(after[role] - before[role], 3) for role in before}
    return summarise(tally) | spent | {"planned_s": duration_s}


def summarise(tally: Tally) -> dict[str, Any]:
    good = [s for s in tally.samples if s.ok]
    latencies = [s.latency_ms for s in good]
    ttfts = [s.ttft_ms for s in good if s.ttft_ms is not None]
    return {
        "scheduled": tally.scheduled,
        "ok": len(good),
        "errors": len(tally.samples) - len(good),
        "timeouts": tally.timeouts,
        "dropped": tally.dropped,
        "wall_s": round(tally.wall_s, 3),
        "p50_ms": _round(percentile(latencies, 50)),
        "p99_ms": _round(percentile(latencies, 99)),
        "ttft_p50_ms": _round(percentile(ttfts, 50)),
        "ttft_p99_ms": _round(percentile(ttfts, 99)),
        "tokens": sum(s.tokens for s in good),
        "short_streams": _short_streams(good),
    }


def _short_streams(good: list[CallResult]) -> int:
    """Streams that delivered fewer tokens than the longest one: a relay losing events."""
    counts = [s.tokens for s in good if s.tokens]
    return sum(1 for c in counts if c < max(counts)) if counts else 0


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)

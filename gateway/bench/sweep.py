"""The sweep: every prompt length x every concurrency level, each a closed loop.

A level runs `concurrency` workers; each sends one request, waits for its stream to end and
sends the next, until the level has sent `requests_per_level` requests or `duration_s` has
passed (requests still in flight then are waited for and kept). Closed-loop load is what a
fixed number of users produces; it shows latency against concurrency, not against an arrival
rate. Levels run one after another on one connection pool.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO

import httpx

from gateway.bench.sweep_client import Clock, Measurement, Target, make_prompt, measure_request


@dataclass(frozen=True, slots=True, order=True)
class Level:
    prompt_tokens: int
    concurrency: int


@dataclass(frozen=True, slots=True)
class SweepPlan:
    prompt_tokens: tuple[int, ...] = (128, 2000)
    concurrency: tuple[int, ...] = (1, 4, 16)
    requests_per_level: int = 32
    duration_s: float | None = None  # when set, each level runs this long instead
    output_tokens: int = 128
    warmup_requests: int = 1

    def levels(self) -> list[Level]:
        return [Level(p, c) for p in self.prompt_tokens for c in self.concurrency]


@dataclass(frozen=True, slots=True)
class SweepSample:
    level: Level
    seq: int
    sent_at_s: float  # since the level started
    measurement: Measurement


@dataclass(frozen=True, slots=True)
class LevelRun:
    level: Level
    wall_s: float  # first send to last stream end
    records: tuple[SweepSample, ...]


class Progress:
    """A one-line progress bar on stderr (one line per level when stderr is not a terminal)."""

    def __init__(self, plan: SweepPlan, stream: TextIO | None = None) -> None:
        self.plan = plan
        self.stream = stream if stream is not None else sys.stderr
        self.live = self.stream.isatty()
        self.done = 0
        self.level_started = time.monotonic()

    def advance(self, level: Level, level_done: int) -> None:
        self.done += 1
        if self.live:
            self.stream.write("\r" + self._line(level, level_done))
            self.stream.flush()

    def level_finished(self, run: LevelRun) -> None:
        failed = sum(1 for r in run.records if not r.measurement.ok)
        summary = f"{self._line(run.level, len(run.records))} in {run.wall_s:.1f}s"
        summary += f", {failed} failed" if failed else ""
        self.stream.write(("\r" if self.live else "") + summary + "\n")
        self.stream.flush()
        self.level_started = time.monotonic()

    def _line(self, level: Level, level_done: int) -> str:
        tag = f"prompt={level.prompt_tokens:>6} c={level.concurrency:>3}"
        if self.plan.duration_s is not None:
            elapsed_s = time.monotonic() - self.level_started
            return f"{tag} requests={level_done:>5} elapsed={elapsed_s:6.1f}s"
        total = len(self.plan.levels()) * self.plan.requests_per_level
        filled = 30 * self.done // max(1, total)
        return f"[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{total} {tag}"


async def run_sweep(
    client: httpx.AsyncClient,
    target: Target,
    plan: SweepPlan,
    progress: Progress | None = None,
    clock: Clock = time.perf_counter,
) -> list[LevelRun]:
    """Run every level of `plan` in order; failures are recorded, never raised."""
    for nonce in range(plan.warmup_requests):  # opens connections; not recorded
        await measure_request(client, target, make_prompt(16, nonce), 4, clock)
    runs = []
    for level in plan.levels():
        run = await run_level(client, target, plan, level, progress, clock)
        if progress is not None:
            progress.level_finished(run)
        runs.append(run)
    return runs


async def run_level(
    client: httpx.AsyncClient,
    target: Target,
    plan: SweepPlan,
    level: Level,
    progress: Progress | None = None,
    clock: Clock = time.perf_counter,
) -> LevelRun:
    start = clock()
    records: list[SweepSample] = []
    seqs = itertools.count()
    more = _more_requests(plan, start, clock)

    async def worker() -> None:
        while more(seq := next(seqs)):
            sent_at_s = clock() - start
            # unique per request in the whole sweep, so no prompt hits the prefix cache
            prompt = make_prompt(level.prompt_tokens, nonce=level.concurrency * 100_000 + seq)
            m = await measure_request(client, target, prompt, plan.output_tokens, clock)
            records.append(SweepSample(level, seq, sent_at_s, m))
            if progress is not None:
                progress.advance(level, len(records))

    async with asyncio.TaskGroup() as group:
        for _ in range(level.concurrency):
            group.create_task(worker())
    return LevelRun(level, clock() - start, tuple(sorted(records, key=lambda r: r.seq)))


def _more_requests(plan: SweepPlan, start: float, clock: Clock) -> Callable[[int], bool]:
    if plan.duration_s is not None:
        duration_s = plan.duration_s
        return lambda seq: clock() - start < duration_s
    return lambda seq: seq < plan.requests_per_level


def flatten(runs: Sequence[LevelRun]) -> list[SweepSample]:
    return [record for run in runs for record in run.records]

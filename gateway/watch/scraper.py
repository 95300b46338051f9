"""Engine /metrics scraping: a tolerant parser over the name table, rates, a poller.

`parse_metrics` reads a Prometheus text page with the table of `gateway/watch/engine_names.py`
(which series carry which signal, for each engine and version). `LatestScrapes` keeps each
endpoint's latest scrape and turns its counters into rates: per second over the scrapes of the
last `rate_window_s` (a counter that goes down, an engine restart, starts the window again).
`Scraper` polls every `kind: vllm` endpoint's /metrics (default every 250 ms) into this
replica's memory. Each endpoint's signals carry their age; past `stale_after_s` they read as
None (unknown), never as zero. The app lifespan runs `Scraper.run()`.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from gateway.config.settings import EndpointConfig
from gateway.telemetry.metrics import log
from gateway.watch.engine_histograms import EngineHistogram, read_histogram, recent
from gateway.watch.engine_names import BY_ENGINE, ENGINES, Found, ScrapedEngine, first
from policies.base import EngineSignals

_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _line_pattern(names: Iterable[str]) -> re.Pattern[str]:
    """A sample line of one of `names` (with or without `_total`): name, labels, value.

    One regex scans the page in C; longest names first, so that no name shadows a longer one
    it is a prefix of.
    """
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    return re.compile(rf"^({alternatives})(?:_total)?(\{{[^\n]*\}}|)[ \t]+(\S+)", re.MULTILINE)


_WANTED_LINE = _line_pattern(set().union(*(row.names() for row in ENGINES)))


@dataclass(frozen=True, slots=True)
class ScrapedState:
    """One scrape's routing signals; None = not exposed by this engine (or unparsable)."""

    engine: str | None = None  # the ENGINES row that matched
    waiting: float | None = None
    running: float | None = None
    kv_usage: float | None = None
    waiting_for_capacity: float | None = None
    kv_capacity_tokens: int | None = None
    preemptions_total: float | None = None
    waiting_deferred: float | None = None
    prefix_cache_queries_total: float | None = None
    prefix_cache_hits_total: float | None = None
    kv_block_size_tokens: int | None = None
    prefix_caching: bool | None = None
    histograms: Histograms = (None, None, None)  # TTFT, inter-token, queue time

    def counters(self) -> Counters:
        """The counters `LatestScrapes` turns into rates, in `Rates`' order."""
        return (
            self.preemptions_total,
            self.prefix_cache_queries_total,
            self.prefix_cache_hits_total,
        )

    def fields(
        self, rates: Rates, window_s: float | None, recents: _Values = (None,) * 6
    ) -> tuple[_Values, _Values]:
        """`EngineSignals` without its age, as the values before `age_s` and those after it;
        `recents`: the histograms' means and p95s over the rate window."""
        head = (
            self.waiting,
            self.running,
            self.kv_usage,
            self.waiting_for_capacity,
            self.kv_capacity_tokens,
            self.preemptions_total,
        )
        preemptions_per_s, queries_per_s, hits_per_s = rates
        tail = (
            self.waiting_deferred,
            preemptions_per_s,
            self.prefix_cache_queries_total,
            self.prefix_cache_hits_total,
            queries_per_s,
            hits_per_s,
            self.kv_block_size_tokens,
            self.prefix_caching,
            window_s,
            *recents,
        )
        return head, tail


Counters = tuple[float | None, float | None, float | None]  # preemptions, prefix queries, hits
Rates = Counters  # the same, per second
Histograms = tuple[EngineHistogram | None, EngineHistogram | None, EngineHistogram | None]
_Values = tuple[float | bool | None, ...]
_NO_RATES: Rates = (None, None, None)
_NO_HISTOGRAMS: Histograms = (None, None, None)
_NO_RECENTS: _Values = (None,) * 6


def parse_metrics(text: str, engine: str = "auto") -> ScrapedState:
    """Routing signals from a Prometheus text page; `engine` is an ENGINES name or "auto"."""
    found = _samples(text)
    row = BY_ENGINE.get(engine) if engine != "auto" else _detect(found)
    if row is None:
        return ScrapedState()
    capacity = first(row.kv_capacity, found)
    block_size = first(row.kv_block_size, found)
    return ScrapedState(
        engine=row.engine,
        waiting=row.waiting.read(found),
        running=row.running.read(found),
        kv_usage=row.kv_usage.read(found),
        waiting_for_capacity=row.waiting_for_capacity.read(found),
        kv_capacity_tokens=round(capacity) if capacity is not None else None,
        preemptions_total=row.preemptions.read(found),
        waiting_deferred=row.waiting_deferred.read(found),
        prefix_cache_queries_total=row.prefix_cache_queries.read(found),
        prefix_cache_hits_total=row.prefix_cache_hits.read(found),
        kv_block_size_tokens=round(block_size) if block_size is not None else None,
        prefix_caching=row.prefix_caching.read(found) if row.prefix_caching else None,
        histograms=(
            read_histogram(row.ttft_histogram, found),
            read_histogram(row.itl_histogram, found),
            read_histogram(row.queue_histogram, found),
        ),
    )


def _detect(found: Found) -> ScrapedEngine | None:
    for row in ENGINES:
        if row.waiting.read(found) is not None or row.running.read(found) is not None:
            return row
    return None


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples of the table's metrics (by base name); malformed and NaN values are skipped."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for match in _WANTED_LINE.finditer(text):
        name, labels, value = match.groups()
        try:
            number = float(value)
        except ValueError:
            continue
        if not math.isnan(number):
            found.setdefault(name, []).append((dict(_LABEL.findall(labels)), number))
    return found


def metrics_url(endpoint: EndpointConfig) -> str:
    return endpoint.metrics_url or f"{endpoint.root_url}/metrics"


class LatestScrapes:
    """Each endpoint's latest scrape, read with its age: unknown values once stale, never zero.

    No clock of its own (callers pass `now` on the clock the scrapes were stamped with), so the
    live scraper and the offline simulator's virtual scrapes age signals the same way. Rates are
    over the scrapes of the last `rate_window_s` seconds: from the oldest of them to the newest.
    """

    def __init__(self, stale_after_s: float, rate_window_s: float = 2.0) -> None:
        self.stale_after_s = stale_after_s
        self.rate_window_s = rate_window_s
        self._latest: dict[str, tuple[_Values, _Values, float]] = {}
        self._history: dict[str, deque[tuple[float, Counters, Histograms]]] = {}

    def put(self, endpoint_id: str, state: ScrapedState, at_s: float) -> None:
        rates, window_s = self._rates(endpoint_id, state, at_s)
        recents = _NO_RECENTS
        if state.histograms != _NO_HISTOGRAMS:  # the offline engines' scrapes carry none
            before = self._history[endpoint_id][0][2]
            recents = tuple(
                value for now, then in zip(state.histograms, before, strict=True)
                for value in recent(now, then)
            )  # fmt: skip
        head, tail = state.fields(rates, window_s, recents)
        self._latest[endpoint_id] = (head, tail, at_s)

    def _rates(
        self, endpoint_id: str, state: ScrapedState, at_s: float
    ) -> tuple[Rates, float | None]:
        counters = state.counters()
        history = self._history.setdefault(endpoint_id, deque())
        if history and _went_down(history[-1][1], counters):
            history.clear()  # the engine restarted: its counters began again
        while history and at_s - history[0][0] > self.rate_window_s:
            history.popleft()
        history.append((at_s, counters, state.histograms))
        since_s, then, _ = history[0]
        span_s = at_s - since_s
        if span_s <= 0:
            return _NO_RATES, None
        rates = tuple(
            None if now is None or before is None else (now - before) / span_s
            for now, before in zip(counters, then, strict=True)
        )
        return (rates[0], rates[1], rates[2]), span_s

    def signals(self, endpoint_id: str, now: float) -> EngineSignals | None:
        """Latest signals with their age; values None once stale; None if never scraped."""
        scrape = self._latest.get(endpoint_id)
        if scrape is None:
            return None
        head, tail, at_s = scrape
        age_s = max(0.0, now - at_s)
        if age_s > self.stale_after_s:
            return EngineSignals(age_s=age_s)
        # Built per endpoint per request: tuple.__new__ on the stored values costs less than
        # EngineSignals(...) with 16 arguments (or _make).
        return _new_tuple(EngineSignals, (*head, age_s, *tail))


_new_tuple = tuple.__new__


def _went_down(before: Counters, now: Counters) -> bool:
    return any(b is not None and n is not None and n < b for b, n in zip(before, now, strict=True))


class Scraper:
    def __init__(
        self,
        endpoints: Sequence[EndpointConfig],
        client: httpx.AsyncClient,
        *,
        interval_s: float = 0.25,
        stale_after_s: float = 2.0,
        rate_window_s: float = 2.0,
        timeout_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """Scrapes the `kind: vllm` endpoints; `clock` and `sleep` are injectable for tests."""
        self.targets = {e.id: metrics_url(e) for e in endpoints if e.kind == "vllm"}
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.latest = LatestScrapes(stale_after_s, rate_window_s)
        self._client = client
        self._clock = clock
        self._sleep = sleep
        self._failing: set[str] = set()

    def signals(self, endpoint_id: str) -> EngineSignals | None:
        """Latest signals with their age (see `LatestScrapes`), on this scraper's clock."""
        return self.latest.signals(endpoint_id, self._clock())

    def all_signals(self) -> dict[str, EngineSignals | None]:
        return {eid: self.signals(eid) for eid in self.targets}

    async def scrape_once(self) -> None:
        await asyncio.gather(*(self._scrape(eid, url) for eid, url in self.targets.items()))

    async def run(self) -> None:
        """Poll every endpoint on its own loop, so one slow endpoint delays no other."""
        async with asyncio.TaskGroup() as group:
            for eid, url in self.targets.items():
                group.create_task(self._poll(eid, url))

    def add(self, endpoint: EndpointConfig) -> Coroutine[Any, Any, None] | None:
        """A discovered member: its polling loop (the caller runs and cancels it), if scraped."""
        if endpoint.kind != "vllm":
            return None
        url = self.targets[endpoint.id] = metrics_url(endpoint)
        return self._poll(endpoint.id, url)

    def remove(self, endpoint_id: str) -> None:
        self.targets.pop(endpoint_id, None)

    async def _poll(self, endpoint_id: str, url: str) -> None:
        while True:
            started = self._clock()
            await self._scrape(endpoint_id, url)
            await self._sleep(max(0.0, self.interval_s - (self._clock() - started)))

    async def _scrape(self, endpoint_id: str, url: str) -> None:
        try:
            response = await self._client.get(url, timeout=self.timeout_s)
            response.raise_for_status()
        except httpx.HTTPError as exc:
            self._note_failure(endpoint_id, exc)
            return
        self.latest.put(endpoint_id, parse_metrics(response.text), self._clock())
        if endpoint_id in self._failing:
            self._failing.discard(endpoint_id)
            log.info("metrics scrape of %s recovered", endpoint_id)

    def _note_failure(self, endpoint_id: str, exc: httpx.HTTPError) -> None:
        # Logged once per outage: at 4 scrapes a second a log line per failure would flood.
        if endpoint_id not in self._failing:
            self._failing.add(endpoint_id)
            log.warning("metrics scrape of %s failed: %s", endpoint_id, type(exc).__name__)

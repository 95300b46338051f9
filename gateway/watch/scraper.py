"""Engine /metrics scraping: a table of metric names per engine, a tolerant parser, a poller.

`ENGINES` is data: for each engine the series that carry each routing signal, newest name first
(the first series present wins, so one row serves every version of an engine). Names are
matched without a `_total` suffix, so counters parse with or without it. Several series of one
signal (data-parallel `engine` labels, several `model_name`s) are combined: counts summed, KV
usage averaged (the pool's usage, since the engine balances between its ranks). KV capacity in
tokens is block size x block count, from an info metric's labels or from two gauges.

`Scraper` polls every `kind: vllm` endpoint's /metrics (default every 250 ms) into this
replica's memory. Each endpoint's signals carry their age; past `stale_after_s` they read as
None (unknown), never as zero. The app lifespan runs `Scraper.run()`.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Literal

import httpx

from gateway.config.settings import EndpointConfig
from gateway.telemetry.metrics import log
from policies.base import EngineSignals

_Found = Mapping[str, list[tuple[dict[str, str], float]]]
_COMBINE: dict[str, Callable[[list[float]], float]] = {"sum": sum, "mean": fmean, "max": max}
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, slots=True)
class ScrapedSeries:
    name: str  # without `_total`
    labels: tuple[tuple[str, str], ...] = ()  # labels a sample must carry

    def values(self, found: _Found) -> list[float]:
        return [
            value
            for labels, value in found.get(self.name, ())
            if all(labels.get(key) == wanted for key, wanted in self.labels)
        ]


def series(name: str, **labels: str) -> ScrapedSeries:
    return ScrapedSeries(name, tuple(sorted(labels.items())))


@dataclass(frozen=True, slots=True)
class Signal:
    """A routing signal: the first of `sources` present wins; its series are combined."""

    sources: tuple[ScrapedSeries, ...] = ()
    combine: Literal["sum", "mean", "max"] = "sum"

    def read(self, found: _Found) -> float | None:
        for source in self.sources:
            values = source.values(found)
            if values:
                return _COMBINE[self.combine](values)
        return None


@dataclass(frozen=True, slots=True)
class LabelProduct:
    """KV tokens from an info metric: the product of numeric labels, summed over series."""

    name: str
    labels: tuple[str, ...]

    def read(self, found: _Found) -> float | None:
        totals = [_label_product(labels, self.labels) for labels, _ in found.get(self.name, ())]
        known = [t for t in totals if t is not None]
        return sum(known) if known else None

    def names(self) -> Iterable[str]:
        return (self.name,)


@dataclass(frozen=True, slots=True)
class SignalProduct:
    """KV tokens as the product of gauges (tokens per block x blocks)."""

    factors: tuple[Signal, ...]

    def read(self, found: _Found) -> float | None:
        values = [factor.read(found) for factor in self.factors]
        return math.prod(v for v in values if v is not None) if None not in values else None

    def names(self) -> Iterable[str]:
        return (s.name for factor in self.factors for s in factor.sources)


def _label_product(labels: Mapping[str, str], keys: Sequence[str]) -> float | None:
    try:
        return math.prod(float(labels[key]) for key in keys)
    except (KeyError, ValueError):  # absent, or "None" when the engine did not resolve it
        return None


@dataclass(frozen=True, slots=True)
class ScrapedEngine:
    engine: str
    waiting: Signal
    running: Signal
    kv_usage: Signal = Signal()  # 0..1
    waiting_for_capacity: Signal = Signal()
    preemptions: Signal = Signal()
    kv_capacity: tuple[LabelProduct | SignalProduct, ...] = ()

    def names(self) -> set[str]:
        signals = (
            self.waiting,
            self.running,
            self.kv_usage,
            self.waiting_for_capacity,
            self.preemptions,
        )
        names = {s.name for signal in signals for s in signal.sources}
        return names.union(*(rule.names() for rule in self.kv_capacity))


ENGINES: tuple[ScrapedEngine, ...] = (
    ScrapedEngine(
        engine="vllm",
        waiting=Signal((series("vllm:num_requests_waiting"),)),
        running=Signal((series("vllm:num_requests_running"),)),
        kv_usage=Signal(
            (
                series("vllm:kv_cache_usage_perc"),  # V1, 0.9+
                series("vllm:gpu_cache_usage_perc"),  # V0 and <= 0.8
            ),
            combine="mean",
        ),
        waiting_for_capacity=Signal(
            (series("vllm:num_requests_waiting_by_reason", reason="capacity"),)
        ),
        preemptions=Signal((series("vllm:num_preemptions"),)),
        kv_capacity=(
            LabelProduct("vllm:cache_config_info", ("num_gpu_blocks", "block_size")),
            LabelProduct("vllm:cache_config_info", ("kv_cache_size_tokens",)),  # 0.32+
        ),
    ),
    ScrapedEngine(
        engine="sglang",
        waiting=Signal((series("sglang:num_queue_reqs"),)),
        running=Signal((series("sglang:num_running_reqs"),)),
        kv_usage=Signal((series("sglang:token_usage"),), combine="mean"),
        kv_capacity=(LabelProduct("sglang:cache_config_info", ("page_size", "num_pages")),),
    ),
    ScrapedEngine(
        engine="trtllm",  # trtllm-serve
        waiting=Signal((series("trtllm_num_requests_waiting"),)),
        running=Signal((series("trtllm_num_requests_running"),)),
        kv_usage=Signal((series("trtllm_kv_cache_utilization"),), combine="mean"),
        kv_capacity=(
            SignalProduct(
                (
                    Signal((series("trtllm_kv_cache_tokens_per_block"),), combine="max"),
                    Signal((series("trtllm_kv_cache_max_blocks"),)),
                )
            ),
        ),
    ),
    ScrapedEngine(
        engine="triton-trtllm",
        waiting=Signal((series("nv_trt_llm_request_metrics", request_type="waiting"),)),
        running=Signal((series("nv_trt_llm_request_metrics", request_type="scheduled"),)),
        kv_usage=Signal(
            (series("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="fraction"),),
            combine="mean",
        ),
        kv_capacity=(
            SignalProduct(
                (
                    Signal(
                        (
                            series(
                                "nv_trt_llm_kv_cache_block_metrics",
                                kv_cache_block_type="tokens_per",
                            ),
                        ),
                        combine="max",
                    ),
                    Signal(
                        (series("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="max"),)
                    ),
                )
            ),
        ),
    ),
    ScrapedEngine(
        engine="tgi",  # no KV gauge and no KV capacity: route TGI on its queue
        waiting=Signal((series("tgi_queue_size"),)),
        running=Signal((series("tgi_batch_current_size"),)),
    ),
)
_BY_ENGINE = {row.engine: row for row in ENGINES}


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

    def signals(self, age_s: float) -> EngineSignals:
        # Positional: built per endpoint per request, where keywords cost twice as much.
        return EngineSignals(
            self.waiting,
            self.running,
            self.kv_usage,
            self.waiting_for_capacity,
            self.kv_capacity_tokens,
            self.preemptions_total,
            age_s,
        )


def parse_metrics(text: str, engine: str = "auto") -> ScrapedState:
    """Routing signals from a Prometheus text page; `engine` is an ENGINES name or "auto"."""
    found = _samples(text)
    row = _BY_ENGINE.get(engine) if engine != "auto" else _detect(found)
    if row is None:
        return ScrapedState()
    capacity = next((c for rule in row.kv_capacity if (c := rule.read(found)) is not None), None)
    return ScrapedState(
        engine=row.engine,
        waiting=row.waiting.read(found),
        running=row.running.read(found),
        kv_usage=row.kv_usage.read(found),
        waiting_for_capacity=row.waiting_for_capacity.read(found),
        kv_capacity_tokens=round(capacity) if capacity is not None else None,
        preemptions_total=row.preemptions.read(found),
    )


def _detect(found: _Found) -> ScrapedEngine | None:
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
    live scraper and the offline simulator's virtual scrapes age signals the same way.
    """

    def __init__(self, stale_after_s: float) -> None:
        self.stale_after_s = stale_after_s
        self._latest: dict[str, tuple[ScrapedState, float]] = {}

    def put(self, endpoint_id: str, state: ScrapedState, at_s: float) -> None:
        self._latest[endpoint_id] = (state, at_s)

    def signals(self, endpoint_id: str, now: float) -> EngineSignals | None:
        """Latest signals with their age; values None once stale; None if never scraped."""
        scrape = self._latest.get(endpoint_id)
        if scrape is None:
            return None
        state, at_s = scrape
        age_s = max(0.0, now - at_s)
        if age_s > self.stale_after_s:
            return EngineSignals(age_s=age_s)
        return state.signals(age_s)


class Scraper:
    def __init__(
        self,
        endpoints: Sequence[EndpointConfig],
        client: httpx.AsyncClient,
        *,
        interval_s: float = 0.25,
        stale_after_s: float = 2.0,
        timeout_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        """Scrapes the `kind: vllm` endpoints; `clock` and `sleep` are injectable for tests."""
        self.targets = {e.id: metrics_url(e) for e in endpoints if e.kind == "vllm"}
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.latest = LatestScrapes(stale_after_s)
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

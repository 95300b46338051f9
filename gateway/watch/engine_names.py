"""Which engine metrics carry which routing signal: a table, one row per engine, as data.

For each engine the series of each signal, newest name first: the first series present wins,
so one row serves every version of an engine. Names are matched without a `_total` suffix, so
counters parse with or without it. Several series of one signal (data-parallel `engine`
labels, several `model_name`s) are combined: counts summed, KV usage averaged (the pool's
usage, since the engine balances between its ranks), block sizes by their largest. KV capacity
in tokens is block size x block count, from an info metric's labels or from two gauges.
`gateway/watch/scraper.py` reads a page with this table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean
from typing import Literal, Protocol

Found = Mapping[str, list[tuple[dict[str, str], float]]]  # base name -> (labels, value) samples
Combine = Literal["sum", "mean", "max"]
_COMBINE: dict[str, Callable[[list[float]], float]] = {"sum": sum, "mean": fmean, "max": max}


@dataclass(frozen=True, slots=True)
class ScrapedSeries:
    name: str  # without `_total`
    labels: tuple[tuple[str, str], ...] = ()  # labels a sample must carry

    def values(self, found: Found) -> list[float]:
        return [
            value
            for labels, value in found.get(self.name, ())
            if all(labels.get(key) == wanted for key, wanted in self.labels)
        ]


def series(name: str, **labels: str) -> ScrapedSeries:
    return ScrapedSeries(name, tuple(sorted(labels.items())))


class Rule(Protocol):
    """A number read from a page's samples; None when the page does not carry it."""

    def read(self, found: Found) -> float | None: ...

    def names(self) -> Iterable[str]: ...


@dataclass(frozen=True, slots=True)
class Signal:
    """A routing signal: the first of `sources` present wins; its series are combined."""

    sources: tuple[ScrapedSeries, ...] = ()
    combine: Combine = "sum"

    def read(self, found: Found) -> float | None:
        for source in self.sources:
            values = source.values(found)
            if values:
                return _COMBINE[self.combine](values)
        return None

    def names(self) -> Iterable[str]:
        return (s.name for s in self.sources)


@dataclass(frozen=True, slots=True)
class LabelProduct:
    """A number from an info metric: the product of numeric labels, combined over series."""

    name: str
    labels: tuple[str, ...]
    combine: Combine = "sum"

    def read(self, found: Found) -> float | None:
        totals = [_label_product(labels, self.labels) for labels, _ in found.get(self.name, ())]
        known = [t for t in totals if t is not None]
        return _COMBINE[self.combine](known) if known else None

    def names(self) -> Iterable[str]:
        return (self.name,)


@dataclass(frozen=True, slots=True)
class SignalProduct:
    """KV tokens as the product of gauges (tokens per block x blocks)."""

    factors: tuple[Signal, ...]

    def read(self, found: Found) -> float | None:
        values = [factor.read(found) for factor in self.factors]
        return math.prod(v for v in values if v is not None) if None not in values else None

    def names(self) -> Iterable[str]:
        return (name for factor in self.factors for name in factor.names())


@dataclass(frozen=True, slots=True)
class LabelFlag:
    """A boolean label of an info metric ("True"/"False"): true only if true on every series."""

    name: str
    label: str

    def read(self, found: Found) -> bool | None:
        flags = [_flag(labels.get(self.label)) for labels, _ in found.get(self.name, ())]
        known = [f for f in flags if f is not None]
        return all(known) if known else None

    def names(self) -> Iterable[str]:
        return (self.name,)


def _label_product(labels: Mapping[str, str], keys: Sequence[str]) -> float | None:
    try:
        return math.prod(float(labels[key]) for key in keys)
    except (KeyError, ValueError):  # absent, or "None" when the engine did not resolve it
        return None


def _flag(value: str | None) -> bool | None:
    lowered = (value or "").lower()
    return True if lowered in ("true", "1") else False if lowered in ("false", "0") else None


def first(rules: Sequence[Rule], found: Found) -> float | None:
    """The value of the first rule the page carries."""
    return next((value for rule in rules if (value := rule.read(found)) is not None), None)


@dataclass(frozen=True, slots=True)
class ScrapedEngine:
    engine: str
    waiting: Signal
    running: Signal
    kv_usage: Signal = Signal()  # 0..1
    waiting_for_capacity: Signal = Signal()  # waiting for the engine's batch slots or KV
    waiting_deferred: Signal = Signal()  # waiting on something else (LoRA budget, KV transfer)
    preemptions: Signal = Signal()  # a counter
    prefix_cache_queries: Signal = Signal()  # a counter, prompt tokens looked up
    prefix_cache_hits: Signal = Signal()  # a counter, of them found cached
    kv_capacity: tuple[Rule, ...] = ()  # tokens
    kv_block_size: tuple[Rule, ...] = ()  # tokens per block
    prefix_caching: LabelFlag | None = None
    # latency histograms, base names newest first (gateway/watch/engine_histograms.py)
    ttft_histogram: tuple[str, ...] = ()
    itl_histogram: tuple[str, ...] = ()  # inter-token latency, per gap
    queue_histogram: tuple[str, ...] = ()  # time waiting before the first scheduling

    def histograms(self) -> tuple[tuple[str, ...], ...]:
        return (self.ttft_histogram, self.itl_histogram, self.queue_histogram)

    def signals(self) -> tuple[Signal, ...]:
        return (
            self.waiting,
            self.running,
            self.kv_usage,
            self.waiting_for_capacity,
            self.waiting_deferred,
            self.preemptions,
            self.prefix_cache_queries,
            self.prefix_cache_hits,
        )

    def names(self) -> set[str]:
        rules: list[Rule] = [*self.signals(), *self.kv_capacity, *self.kv_block_size]
        if self.prefix_caching is not None:
            rules.append(self.prefix_caching)
        histograms = {
            name + suffix
            for names in self.histograms()
            for name in names
            for suffix in ("_bucket", "_sum", "_count")
        }
        return {name for rule in rules for name in rule.names()} | histograms


_VLLM_CACHE_CONFIG = "vllm:cache_config_info"
_TRTLLM_TOKENS_PER_BLOCK = Signal((series("trtllm_kv_cache_tokens_per_block"),), combine="max")
_TRITON_TOKENS_PER_BLOCK = Signal(
    (series("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="tokens_per"),),
    combine="max",
)

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
        waiting_deferred=Signal(
            (series("vllm:num_requests_waiting_by_reason", reason="deferred"),)
        ),
        preemptions=Signal((series("vllm:num_preemptions"),)),
        prefix_cache_queries=Signal(
            (
                series("vllm:prefix_cache_queries"),  # 0.9+
                series("vllm:gpu_prefix_cache_queries"),  # <= 0.8
            )
        ),
        prefix_cache_hits=Signal(
            (series("vllm:prefix_cache_hits"), series("vllm:gpu_prefix_cache_hits"))
        ),
        kv_capacity=(
            LabelProduct(_VLLM_CACHE_CONFIG, ("num_gpu_blocks", "block_size")),
            LabelProduct(_VLLM_CACHE_CONFIG, ("kv_cache_size_tokens",)),  # 0.32+
        ),
        kv_block_size=(LabelProduct(_VLLM_CACHE_CONFIG, ("block_size",), combine="max"),),
        prefix_caching=LabelFlag(_VLLM_CACHE_CONFIG, "enable_prefix_caching"),
        ttft_histogram=("vllm:time_to_first_token_seconds",),
        itl_histogram=(
            "vllm:inter_token_latency_seconds",  # 0.11+
            "vllm:time_per_output_token_seconds",  # its older name, per gap too
        ),
        queue_histogram=("vllm:request_queue_time_seconds",),
    ),
    ScrapedEngine(
        engine="sglang",
        waiting=Signal((series("sglang:num_queue_reqs"),)),
        running=Signal((series("sglang:num_running_reqs"),)),
        kv_usage=Signal((series("sglang:token_usage"),), combine="mean"),
        kv_capacity=(LabelProduct("sglang:cache_config_info", ("page_size", "num_pages")),),
        kv_block_size=(LabelProduct("sglang:cache_config_info", ("page_size",), combine="max"),),
        ttft_histogram=("sglang:time_to_first_token_seconds",),
        itl_histogram=(
            "sglang:inter_token_latency_seconds",
            "sglang:time_per_output_token_seconds",
        ),
        queue_histogram=("sglang:queue_time_seconds",),
    ),
    ScrapedEngine(
        engine="trtllm",  # trtllm-serve
        waiting=Signal((series("trtllm_num_requests_waiting"),)),
        running=Signal((series("trtllm_num_requests_running"),)),
        kv_usage=Signal((series("trtllm_kv_cache_utilization"),), combine="mean"),
        kv_capacity=(
            SignalProduct(
                (_TRTLLM_TOKENS_PER_BLOCK, Signal((series("trtllm_kv_cache_max_blocks"),)))
            ),
        ),
        kv_block_size=(_TRTLLM_TOKENS_PER_BLOCK,),
        ttft_histogram=("trtllm_time_to_first_token_seconds",),
        itl_histogram=("trtllm_time_per_output_token_seconds",),
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
                    _TRITON_TOKENS_PER_BLOCK,
                    Signal(
                        (series("nv_trt_llm_kv_cache_block_metrics", kv_cache_block_type="max"),)
                    ),
                )
            ),
        ),
        kv_block_size=(_TRITON_TOKENS_PER_BLOCK,),
    ),
    ScrapedEngine(
        engine="tgi",  # no KV gauge and no KV capacity: route TGI on its queue
        waiting=Signal((series("tgi_queue_size"),)),
        running=Signal((series("tgi_batch_current_size"),)),
    ),
)
BY_ENGINE = {row.engine: row for row in ENGINES}

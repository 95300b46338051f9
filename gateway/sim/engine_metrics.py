"""vLLM's `/metrics` page for a simulated replica: the 0.32 (V1) names, labels and buckets.

Gauges and token counters are read from the model's snapshot at scrape time; latency
histograms are observed by the engine loop as tokens leave. The prefix cache's counters are in
tokens: queries are the prompt tokens of admitted requests, hits those found cached (both 0 with
prefix caching off, as vLLM skips the lookup). With `legacy` the page also carries the old names
some routers still scrape (`vllm:gpu_cache_usage_perc`, `vllm:time_per_output_token_seconds`,
`vllm:gpu_prefix_cache_{queries,hits}_total` and the V0 gauge `vllm:gpu_prefix_cache_hit_rate`,
here hits over queries since the start).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from operator import attrgetter

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.sim.model import EngineSnapshot

TTFT_BUCKETS_S = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
ITL_BUCKETS_S = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
E2E_BUCKETS_S = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)
FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
_LABELS = ("engine", "model_name")

# attribute -> (name, help, buckets), as vLLM 0.32 names them
_HISTOGRAMS: dict[str, tuple[str, str, tuple[float, ...]]] = {
    "ttft": (
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        TTFT_BUCKETS_S,
    ),
    "itl": (
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        ITL_BUCKETS_S,
    ),
    "tpot": (
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        ITL_BUCKETS_S,
    ),
    "e2e": (
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        E2E_BUCKETS_S,
    ),
    "prompt_tokens": (
        "vllm:request_prompt_tokens",
        "Number of prefill tokens processed.",
        TOKEN_BUCKETS,
    ),
    "generation_tokens": (
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
        TOKEN_BUCKETS,
    ),
}
_LEGACY_TPOT = (
    "vllm:time_per_output_token_seconds",
    "Histogram of time per output token in seconds.",
    ITL_BUCKETS_S,
)

# (name, help, snapshot field); counters are named without `_total`, as prometheus_client wants
_GAUGES = (
    ("vllm:num_requests_running", "Number of requests in model execution batches.", "running"),
    ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "waiting"),
    ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "kv_usage"),
)
_LEGACY_GAUGES = (
    ("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", "kv_usage"),
    ("vllm:gpu_prefix_cache_hit_rate", "GPU prefix cache block hit rate.", "prefix_hit_rate"),
)
_COUNTERS = (
    (
        "vllm:num_preemptions",
        "Cumulative number of preemption from the engine.",
        "preemptions_total",
    ),
    ("vllm:prompt_tokens", "Number of prefill tokens processed.", "prompt_tokens_total"),
    (
        "vllm:generation_tokens",
        "Number of generation tokens processed.",
        "generation_tokens_total",
    ),
    (
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        "prefix_cache_queries_total",
    ),
    (
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        "prefix_cache_hits_total",
    ),
)
_LEGACY_COUNTERS = (
    (
        "vllm:gpu_prefix_cache_queries",
        "GPU prefix cache queries, in terms of number of queried tokens.",
        "prefix_cache_queries_total",
    ),
    (
        "vllm:gpu_prefix_cache_hits",
        "GPU prefix cache hits, in terms of number of cached tokens.",
        "prefix_cache_hits_total",
    ),
)


class EngineMetrics:
    def __init__(
        self, model_name: str, snapshot: Callable[[], EngineSnapshot], *, legacy: bool = False
    ) -> None:
        self.registry = CollectorRegistry()
        self._labels = ("0", model_name)
        self.registry.register(_SnapshotCollector(self._labels, snapshot, legacy=legacy))
        self._histograms = {key: self._histogram(*spec) for key, spec in _HISTOGRAMS.items()}
        self._legacy_tpot = self._histogram(*_LEGACY_TPOT) if legacy else None
        self._success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*_LABELS, "finished_reason"],
            registry=self.registry,
        )
        for reason in FINISHED_REASONS:
            self._success.labels(*self._labels, reason)

    def first_token(self, ttft_s: float) -> None:
        self._histograms["ttft"].observe(ttft_s)

    def token_gap(self, gap_s: float) -> None:
        self._histograms["itl"].observe(gap_s)
        if self._legacy_tpot is not None:
            self._legacy_tpot.observe(gap_s)

    def finished(
        self,
        *,
        e2e_s: float,
        decode_s: float,
        prompt_tokens: int,
        output_tokens: int,
        reason: str,
    ) -> None:
        self._success.labels(*self._labels, reason).inc()
        self._histograms["e2e"].observe(e2e_s)
        self._histograms["prompt_tokens"].observe(prompt_tokens)
        self._histograms["generation_tokens"].observe(output_tokens)
        if output_tokens > 1:
            self._histograms["tpot"].observe(decode_s / (output_tokens - 1))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def _histogram(self, name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
        family = Histogram(name, doc, _LABELS, buckets=buckets, registry=self.registry)
        return family.labels(*self._labels)


class _SnapshotCollector(Collector):
    """Gauges and counters computed from the model's state at scrape time."""

    def __init__(
        self, labels: tuple[str, str], snapshot: Callable[[], EngineSnapshot], *, legacy: bool
    ) -> None:
        self._labels = list(labels)
        self._snapshot = snapshot
        self._gauges = _GAUGES + _LEGACY_GAUGES if legacy else _GAUGES
        self._counters = _COUNTERS + _LEGACY_COUNTERS if legacy else _COUNTERS
        self._created = time.time()

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        for name, doc, attr in self._gauges:
            gauge = GaugeMetricFamily(name, doc, labels=_LABELS)
            gauge.add_metric(self._labels, attrgetter(attr)(snap))
            yield gauge
        for name, doc, attr in self._counters:
            counter = CounterMetricFamily(name, doc, labels=_LABELS)
            counter.add_metric(self._labels, attrgetter(attr)(snap), created=self._created)
            yield counter
        yield self._waiting_by_reason(snap)
        yield self._cache_config(snap)

    def _waiting_by_reason(self, snap: EngineSnapshot) -> GaugeMetricFamily:
        family = GaugeMetricFamily(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
            "scheduling capacity; 'deferred' = deferred by transient constraints.",
            labels=[*_LABELS, "reason"],
        )
        family.add_metric([*self._labels, "capacity"], snap.waiting_capacity)
        family.add_metric([*self._labels, "deferred"], snap.waiting_deferred)
        return family

    def _cache_config(self, snap: EngineSnapshot) -> GaugeMetricFamily:
        info = {
            "block_size": str(snap.block_size),
            "num_gpu_blocks": str(snap.num_gpu_blocks),
            "kv_cache_size_tokens": str(snap.block_size * snap.num_gpu_blocks),
            "enable_prefix_caching": str(snap.enable_prefix_caching),
            "cache_dtype": "auto",
        }
        family = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=[*_LABELS, *info],
        )
        family.add_metric([*self._labels, *info.values()], 1.0)
        return family

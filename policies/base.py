"""The routing contract: immutable inputs, a ranking out.

A policy is pure: it reads a `RouteRequest` and one `EndpointSnapshot` per candidate and returns
a `Ranking`. No I/O, no clock reads, no metrics or logs; randomness only through the
`random.Random` the caller injects. The orchestrator (`gateway/server/router.py`) has already
dropped unhealthy endpoints, handles an empty ranking, and times the call.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NamedTuple, Protocol

EndpointKind = Literal["vllm", "openai"]


class _NoCached(Mapping[str, float]):
    """The empty, hashable mapping: `RouteRequest.cached_tokens` when nothing is predicted."""

    def __getitem__(self, key: str) -> float:
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        """The default at once: Mapping.get would raise and catch a KeyError, per endpoint per
        request in the estimate and the ranking."""
        return default

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __hash__(self) -> int:
        return 0


NO_CACHED: Mapping[str, float] = _NoCached()


@dataclass(frozen=True, slots=True)
class SloTarget:
    """What a request's class promises. Times in seconds; None means no target."""

    name: str
    ttft_s: float | None = None
    tpot_s: float | None = None
    deadline_s: float | None = None
    priority: int = 0
    sheddable: bool = False
    # output tokens a request without max_tokens is expected to write (None: admission's
    # default_output_tokens): its KV footprint, its token reservation and its predicted cost
    default_output_tokens: int | None = None
    # a request that misses its targets on every endpoint even idle (by its own size): served
    # on the best prediction and flagged, or refused (policies/admission.py, "By prediction")
    when_unmeetable: Literal["best_effort", "reject"] = "best_effort"

    def answer_budget_s(self, output_tokens: int) -> float | None:
        """How long a non-streamed answer of `output_tokens` may take: the TTFT target plus the
        TPOT target per token after the first, and no more than the deadline; None when the
        class sets neither a TTFT target nor a deadline. The client sees no token before the
        whole answer, so the streamed targets are held to the whole answer's time: an
        embedding (no output tokens) has the TTFT target."""
        budget_s = None
        if self.ttft_s is not None:
            budget_s = self.ttft_s + (self.tpot_s or 0.0) * max(0, output_tokens - 1)
        if self.deadline_s is not None:
            budget_s = self.deadline_s if budget_s is None else min(budget_s, self.deadline_s)
        return budget_s


class RouteRequest(NamedTuple):
    """One request as routing sees it (immutable; a NamedTuple, like `EndpointSnapshot`: built
    once per request, and again with its predicted cached tokens, where a frozen dataclass's
    __init__ cost about 2 µs more; copy it with `_replace`)."""

    request_id: str  # the gateway's own id, unique per request (never a client's label)
    model: str
    tenant: str
    slo: SloTarget
    prompt_tokens: int
    max_tokens: int | None = None
    # False: judged, and so predicted, by its whole answer (`SloTarget.answer_budget_s`)
    stream: bool = True
    seq: int = 0  # a per-replica request counter, so rotation-based policies stay pure
    # the client's conversation key (x-session-id, else prompt_cache_key, else user), if any
    session: str | None = None
    # endpoint id -> tokens of this prompt predicted to be in its prefix cache, discounted by
    # the index's precision (gateway/core/prefix_index.py); endpoints not named: none. A
    # mapping rather than a snapshot field, so a hit costs no snapshot rebuilt.
    cached_tokens: Mapping[str, float] = NO_CACHED
    # whose share of its class this request counts to (policies/fair_share.py): None for its
    # tenant, else "<tenant>/<id>", a sub-tenant the tenant lets clients name
    fairness_key: str | None = None


class EngineSignals(NamedTuple):
    """One scrape of an engine's signals; each value is None when unknown or stale.

    Every value is as old as its scrape, `age_s`. Gauges and counters are readings at that
    scrape; the `_per_s` rates are over the scrapes of the last `rate_window_s` up to it (the
    scraper's window, shorter after a gap or a counter reset), so what they describe is at most
    `age_s + rate_window_s` old. Policies read rates, not counters: a counter's total says
    nothing about now. Engine config (capacity, block size, prefix caching) comes with each
    scrape too, so it goes unknown with the rest when stale.

    A NamedTuple, like `EndpointSnapshot`: both are built per endpoint per request, where a
    frozen dataclass's __init__ costs 3-4x more (one object.__setattr__ per field).
    """

    waiting: float | None = None
    running: float | None = None
    kv_usage: float | None = None  # 0..1 of the KV pool in use
    waiting_for_capacity: float | None = None  # waiting for the engine's batch slots or KV
    kv_capacity_tokens: int | None = None
    preemptions_total: float | None = None
    age_s: float | None = None
    waiting_deferred: float | None = None  # waiting on something else (LoRA budget, KV transfer)
    preemptions_per_s: float | None = None
    prefix_cache_queries_total: float | None = None  # prompt tokens looked up in the cache
    prefix_cache_hits_total: float | None = None  # of them found cached
    prefix_cache_queries_per_s: float | None = None
    prefix_cache_hits_per_s: float | None = None
    kv_block_size_tokens: int | None = None
    prefix_caching: bool | None = None  # the engine caches prefixes
    rate_window_s: float | None = None  # the span the `_per_s` rates are over
    # The engine's latency histograms over the same span (mean and approximate p95, seconds):
    # a cross-check of the gateway's own estimate (gateway/watch/engine_histograms.py).
    ttft_recent_s: float | None = None
    ttft_recent_p95_s: float | None = None
    itl_recent_s: float | None = None  # inter-token latency, per gap
    itl_recent_p95_s: float | None = None
    queue_recent_s: float | None = None  # time requests waited before being scheduled
    queue_recent_p95_s: float | None = None


@dataclass(frozen=True, slots=True)
class FastWindow:
    """Plain sums of an endpoint's last few seconds (policies/step_change.py): first tokens
    and running streams' TPOT stretches (weighted by their tokens)."""

    ttft_n: float = 0.0
    ttft_sum_s: float = 0.0
    tpot_n: float = 0.0
    tpot_sum_s: float = 0.0
    prompt_tokens_sum: float = 0.0  # of the first tokens' requests
    in_flight_sum: float = 0.0  # of the stretches, by the same weights as tpot_n

    @property
    def ttft_mean_s(self) -> float | None:
        return self.ttft_sum_s / self.ttft_n if self.ttft_n > 0 else None

    @property
    def tpot_mean_s(self) -> float | None:
        return self.tpot_sum_s / self.tpot_n if self.tpot_n > 0 else None


@dataclass(frozen=True, slots=True)
class LatencyEstimate:
    """Rolling per-endpoint statistics over the store's window, merged across replicas.

    TTFT is modelled as `ttft_base_s + ttft_per_token_s * prompt_tokens` and TPOT as
    `tpot_base_s + tpot_per_in_flight_s * in_flight` (least-squares fits over the window, recent
    buckets weighted more; see gateway/state/window.py); `samples` lets a policy tell a cold
    endpoint from a fast one.
    """

    samples: int = 0
    errors: int = 0
    throttled: int = 0
    ttft_mean_s: float | None = None
    ttft_base_s: float | None = None
    ttft_per_token_s: float | None = None
    ttft_p50_s: float | None = None
    ttft_p95_s: float | None = None
    tpot_mean_s: float | None = None
    tpot_base_s: float | None = None  # TPOT = tpot_base_s + tpot_per_in_flight_s * in_flight
    tpot_per_in_flight_s: float | None = None
    tpot_p50_s: float | None = None
    tpot_p95_s: float | None = None
    e2e_mean_s: float | None = None
    prompt_tokens_mean: float | None = None  # of the window's requests, None when unknown
    # measured / predicted mean, over the window's attempts that carried a prediction: how
    # many, and the (decayed) 95th percentile; the estimate's p95 is the mean times it
    ttft_ratio_n: int = 0
    ttft_ratio_p95: float | None = None
    tpot_ratio_n: int = 0
    tpot_ratio_p95: float | None = None
    # The last few seconds (policies/step_change.py), and a step detected against the window
    # (ratio 1.0: none), which the statistics above then carry.
    fast: FastWindow | None = None
    step_ratio: float = 1.0
    step_signal: str = ""  # "tpot" or "ttft": what showed the step
    step_at_s: float | None = None  # when it was seen (unix s)

    @property
    def error_rate(self) -> float:
        return self.errors / self.samples if self.samples else 0.0


_NO_ESTIMATE = LatencyEstimate()  # the shared default: frozen, so one instance serves all


class EndpointSnapshot(NamedTuple):
    """One candidate endpoint as a policy sees it (immutable; a NamedTuple for construction
    speed, see `EngineSignals`: compare and copy it by field, `_replace`, not as a tuple)."""

    endpoint_id: str
    kind: EndpointKind
    in_flight: int = 0  # gateway-wide leases on this endpoint (all replicas)
    in_flight_tokens: int = 0  # KV footprint (prompt + max output) of this replica's in-flight
    max_concurrency: int | None = None
    input_price_per_1m: float = 0.0
    output_price_per_1m: float = 0.0
    engine: EngineSignals | None = None
    latency: LatencyEstimate = _NO_ESTIMATE
    cached_input_price_per_1m: float = 0.0  # prompt tokens read from a prompt cache
    # uncached prompt tokens of this replica's in-flight requests on it before their first
    # token (a non-streamed request's first token is not seen: it counts until it ends)
    prefill_tokens: int = 0

    @property
    def self_hosted(self) -> bool:
        return self.kind == "vllm"

    def cost(self, prompt_tokens: int, output_tokens: int, cached_tokens: float = 0.0) -> float:
        """USD for the request, `cached_tokens` of its prompt at the cached input rate."""
        cached = min(float(prompt_tokens), cached_tokens)
        return (
            (prompt_tokens - cached) * self.input_price_per_1m
            + cached * self.cached_input_price_per_1m
            + output_tokens * self.output_price_per_1m
        ) / 1e6


class Prediction(NamedTuple):
    """What a policy predicts for a request on one endpoint (policies/estimate.py)."""

    ttft_mean_s: float
    ttft_p95_s: float
    tpot_mean_s: float
    tpot_p95_s: float
    output_tokens: int
    queued: float  # requests estimated ahead of this one
    cold: bool
    uncertainty: float = 1.0  # u ≥ 1: the p95s are cautious by this factor (1 when warm)

    @property
    def e2e_p95_s(self) -> float:
        return self.ttft_p95_s + self.tpot_p95_s * self.output_tokens


class Ranking(NamedTuple):
    """Endpoints best first, plus what the policy predicted, for explanation headers (a
    NamedTuple: built once per decision; copy it with `_replace`). `predictions`, when the
    policy predicts, is one per endpoint in the same order: the outcome of an attempt is
    recorded against its endpoint's, so the store learns how outcomes deviate from them."""

    endpoints: tuple[EndpointSnapshot, ...]
    predicted_ttft_s: float | None = None
    at_risk: bool = False
    reason: str = ""
    predicted_ttft_p95_s: float | None = None  # the quantile judged against the class SLO
    # the class target closest to being missed: ttft, tpot or deadline; e2e for a request
    # that does not stream (its whole answer against `SloTarget.answer_budget_s`)
    binding: str = ""
    binding_p95_s: float | None = None  # the first endpoint's p95 judged against it
    binding_target_s: float | None = None  # that target
    predictions: tuple[Prediction, ...] = ()

    def predicted(self, endpoint_id: str) -> Prediction | None:
        """The prediction for `endpoint_id` (None: the policy made none)."""
        for snapshot, prediction in zip(self.endpoints, self.predictions, strict=False):
            if snapshot.endpoint_id == endpoint_id:
                return prediction
        return None


class RoutingPolicy(Protocol):
    name: ClassVar[str]

    def rank(
        self, request: RouteRequest, candidates: Sequence[EndpointSnapshot], rng: random.Random
    ) -> Ranking: ...

"""The simulated fleet in virtual time: the same engine and provider models as the servers.

`VirtualEngine` wraps `gateway.sim.model.EngineModel` and `VirtualProvider` wraps
`gateway.sim.provider.ProviderLatency`; both apply `gateway.sim.faults.FaultState` exactly as
the HTTP servers do, in the same order (`gateway/sim/frontend.py`): `status_code`, then
`insufficient_quota`, then `error_rate`, then `hang`, then the member's own refusal (context
too long for an engine, the concurrency limit with Retry-After for a provider), with the same
statuses, headers and error bodies, so the gateway's own classification (`gateway.core.rate_limits`)
reads them. The caller owns the clock: methods take `now_s`, virtual seconds from the start.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.offline.scenario import EngineSpec, ProviderSpec
from gateway.sim.faults import FaultState
from gateway.sim.model import EngineModel, EngineSnapshot, StepResult
from gateway.sim.prompt_blocks import sequence_hashes
from gateway.sim.provider import HostedPromptCache, ProviderLatency, go_duration
from gateway.sim.wire import error_body
from gateway.watch.scraper import ScrapedState


@dataclass(frozen=True, slots=True)
class Refusal:
    """An answer before the first byte, as the gateway's attempt receives it."""

    status: int  # 0 = no answer (hang; the gateway gives up at its first-byte timeout)
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


def _error(
    status: int, message: str, error_type: str, code: str | None = None, **headers: str
) -> Refusal:
    """What `gateway.sim.frontend.error_response` sends."""
    return Refusal(status, headers, json.dumps(error_body(message, error_type, code=code)).encode())


HANG = Refusal(0)
SERVER_ERROR = _error(500, "simulated internal error", "server_error")
QUOTA = _error(
    429,
    "You exceeded your current quota, please check your plan and billing details.",
    "insufficient_quota",
    code="insufficient_quota",
)
CONTEXT_TOO_LONG = _error(400, "context length exceeded", "BadRequestError")


def _fault_refusal(faults: FaultState) -> Refusal | None:
    """`Frontend._check_faults`, then the `hang` check, in the frontend's order."""
    current = faults.faults
    if current.status_code is not None:
        return _error(current.status_code, "simulated failure", "server_error")
    if current.insufficient_quota:
        return QUOTA
    if faults.inject_error():
        return SERVER_ERROR
    if current.hang:
        return HANG
    return None


class VirtualEngine:
    kind = "vllm"

    def __init__(self, spec: EngineSpec, seed: int) -> None:
        self.id = spec.id
        self.params = spec.params
        self.model = EngineModel(spec.params)
        self.faults = FaultState(spec.params.faults, now_s=0.0, seed=seed)
        self.stepping = False  # a step is under way (its end is an event)
        self.pending: StepResult | None = None

    def refuse(self, prompt_tokens: int, max_tokens: int) -> Refusal | None:
        refusal = _fault_refusal(self.faults)
        if refusal is None and prompt_tokens + max_tokens > self.params.max_model_len:
            return CONTEXT_TOO_LONG
        return refusal

    def submit(
        self, request_id: str, prompt_tokens: int, max_tokens: int, text: str | None = None
    ) -> None:
        """`text`: the rendered prompt (`gateway.sim.wire.prompt_text`), when the plan has
        one: its blocks are hashed as the engine server hashes them, so it can hit."""
        hashes: tuple[int, ...] = ()
        if text is not None and self.params.enable_prefix_caching:
            hashes = sequence_hashes(text, max_tokens, self.params.block_size)
        self.model.submit(request_id, prompt_tokens, max_tokens, hashes)

    def step(self, now_s: float) -> float:
        """Start the next step; returns its duration (the result waits in `pending`)."""
        self.model.slowdown = self.faults.slowdown(now_s)
        self.pending = self.model.step()
        self.stepping = True
        return self.pending.duration_s

    def snapshot(self) -> EngineSnapshot:
        return self.model.snapshot()

    def healthy(self) -> bool:
        """What a probe of /health sees: the `status_code` fault answers there too."""
        return self.faults.faults.status_code is None


def scraped_state(snapshot: EngineSnapshot) -> ScrapedState:
    """What the scraper parses from this engine's /metrics page (`gateway.sim.engine_metrics`
    publishes these values under vLLM's names), without rendering and parsing the page."""
    return ScrapedState(
        engine="vllm",
        waiting=float(snapshot.waiting),
        running=float(snapshot.running),
        kv_usage=snapshot.kv_usage,
        waiting_for_capacity=float(snapshot.waiting_capacity),
        kv_capacity_tokens=snapshot.num_gpu_blocks * snapshot.block_size,
        preemptions_total=float(snapshot.preemptions_total),
        waiting_deferred=float(snapshot.waiting_deferred),
        kv_block_size_tokens=snapshot.block_size,
        prefix_caching=snapshot.enable_prefix_caching,
        prefix_cache_queries_total=float(snapshot.prefix_cache_queries_total),
        prefix_cache_hits_total=float(snapshot.prefix_cache_hits_total),
    )


class VirtualProvider:
    kind = "openai"

    def __init__(self, spec: ProviderSpec, seed: int) -> None:
        self.id = spec.id
        self.params = spec.params
        self.faults = FaultState(spec.params.faults, now_s=0.0, seed=seed)
        self.latency = ProviderLatency(spec.params, random.Random(seed))
        self.cache = HostedPromptCache(spec.params)
        self.in_flight = 0

    def refuse(self) -> Refusal | None:
        refusal = _fault_refusal(self.faults)
        if refusal is None and self.in_flight >= self.params.max_concurrency:
            return _error(
                429,
                "Rate limit reached for requests. Please try again later.",
                "requests",
                code="rate_limit_exceeded",
                **{"retry-after": str(math.ceil(self.params.retry_after_s))},
                **self.limit_headers(remaining=0),
            )
        return refusal

    def limit_headers(self, *, remaining: int) -> dict[str, str]:
        """OpenAI's `x-ratelimit-*-requests`, as `ProviderRuntime` sends them."""
        return {
            "x-ratelimit-limit-requests": str(self.params.max_concurrency),
            "x-ratelimit-remaining-requests": str(remaining),
            "x-ratelimit-reset-requests": go_duration(self.params.retry_after_s),
        }

    def healthy(self) -> bool:
        """A provider is probed at /models, which the simulated faults leave alone."""
        return True

    def start(
        self, prompt_tokens: int, output_tokens: int, now_s: float, text: str | None = None
    ) -> Served:
        """Serve one request from now_s: its token times, the response's limit headers and the
        prompt tokens found in the provider's prompt cache (`text`: the rendered prompt, when
        the plan has one; without it nothing is cached)."""
        cached = None if text is None else self.cache.lookup(text, None, prompt_tokens, now_s)
        ttft_s, tpot_s = self.latency.draw(prompt_tokens, cached or 0)
        slowdown = self.faults.slowdown(now_s)
        first_s = now_s + ttft_s * slowdown
        self.in_flight += 1
        headers = self.limit_headers(remaining=max(0, self.params.max_concurrency - self.in_flight))
        last_s = first_s + tpot_s * slowdown * (output_tokens - 1)
        return Served(first_s, last_s, headers, cached)


@dataclass(frozen=True, slots=True)
class Served:
    first_s: float
    last_s: float
    headers: Mapping[str, str]
    cached: int | None = None  # of the prompt in the provider's cache (None: no prompt text)

"""A simulated hosted OpenAI-compatible API: latency draws, a concurrency limit, auth.

Per request, TTFT = lognormal(median ttft_median_s, sigma ttft_sigma) + ttft_per_prompt_token_s
* (prompt_tokens - cached_tokens), and one TPOT = lognormal(tpot_median_s, tpot_sigma) paces
every later token; both are multiplied by the current slowdown fault.

Prompt caching as OpenAI documents it: only prompts of `prompt_cache_min_tokens` (1,024) tokens
or more are cached; a prompt's cached tokens are the longest prefix seen before in an earlier
prompt, in whole steps of `prompt_cache_step_tokens` (128) and at least the minimum, else 0. A
prefix is a chain of hashes over 128-token blocks of the rendered prompt (`prompt_blocks.py`),
kept in an LRU of `prompt_cache_blocks` blocks per provider that forgets blocks unused for
`prompt_cache_ttl_s` (OpenAI: 5-10 minutes of inactivity). `usage.prompt_tokens_details`
always carries `cached_tokens`, as OpenAI's API does; what cached tokens cost is the gateway's
price table's business. Requests beyond `max_concurrency` in flight
get 429 with `Retry-After` and OpenAI's `x-ratelimit-*-requests` headers, which also ride on
every successful response (the reset is a Go-style duration such as `1s` or `6m0s`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.applications import Starlette
from starlette.responses import Response

from gateway.sim.api_routes import ApiRoutes
from gateway.sim.faults import Faults, FaultState
from gateway.sim.frontend import Frontend, FrontendOptions, error_response
from gateway.sim.prompt_blocks import block_hashes
from gateway.sim.wire import CompletionRequest, PromptDetails


class ProviderParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = "llama3-8b-hosted"
    api_key: str = Field(default="sk-sim-provider", min_length=1)
    strict_model: bool = True
    default_max_tokens: int = Field(default=64, ge=1)
    ttft_median_s: float = Field(default=0.15, gt=0)
    ttft_sigma: float = Field(default=0.3, ge=0)
    ttft_per_prompt_token_s: float = Field(default=2e-5, ge=0)
    tpot_median_s: float = Field(default=0.012, gt=0)
    tpot_sigma: float = Field(default=0.2, ge=0)
    max_concurrency: int = Field(default=32, ge=1)
    prompt_caching: bool = True
    prompt_cache_min_tokens: int = Field(default=1024, ge=1)
    prompt_cache_step_tokens: int = Field(default=128, ge=1)
    prompt_cache_blocks: int = Field(default=8192, ge=1)
    prompt_cache_ttl_s: float = Field(default=300.0, gt=0)
    retry_after_s: float = Field(default=1.0, gt=0)
    separate_finish: bool = True  # OpenAI style: finish_reason on its own empty-delta chunk
    seed: int | None = None
    faults: Faults = Faults()


def go_duration(seconds: float) -> str:
    """Format like Go's time.Duration.String, as OpenAI's reset headers do: 12ms, 1s, 6m0s."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    minutes, rest_s = divmod(seconds, 60)
    rest = f"{rest_s:.3f}".rstrip("0").rstrip(".") + "s"
    hours, minutes = divmod(int(minutes), 60)
    if hours:
        return f"{hours}h{minutes}m{rest}"
    return f"{minutes}m{rest}" if minutes else rest


class ProviderLatency:
    """Per-request latency draws, clock-free, so the offline simulator can reuse them."""

    def __init__(self, params: ProviderParams, rng: random.Random) -> None:
        self.params = params
        self._rng = rng

    def draw(self, prompt_tokens: int, cached_tokens: int = 0) -> tuple[float, float]:
        """(ttft_s, tpot_s) of one request, before any slowdown; cached tokens skip prefill."""
        p = self.params
        ttft_s = self._lognormal(p.ttft_median_s, p.ttft_sigma)
        ttft_s += p.ttft_per_prompt_token_s * (prompt_tokens - cached_tokens)
        return ttft_s, self._lognormal(p.tpot_median_s, p.tpot_sigma)

    def _lognormal(self, median_s: float, sigma: float) -> float:
        return self._rng.lognormvariate(math.log(median_s), sigma)


class HostedPromptCache:
    """The provider's prompt prefixes, clock-free: block hash -> when last seen."""

    def __init__(self, params: ProviderParams) -> None:
        self.params = params
        self._seen: OrderedDict[int, float] = OrderedDict()

    def lookup(self, text: str, salt: str | None, prompt_tokens: int, now_s: float) -> int:
        """Cached tokens of a prompt rendered as `text` (`wire.prompt_text`), remembered; 0
        when caching is off or the prompt is under the minimum. The live runtime and the
        offline provider both ask here."""
        p = self.params
        if not p.prompt_caching or prompt_tokens < p.prompt_cache_min_tokens:
            return 0  # nothing to look up or remember: no need to hash
        hashes = block_hashes(text, p.prompt_cache_step_tokens, salt=salt)
        return self.serve(hashes, prompt_tokens, now_s)

    def serve(self, hashes: Sequence[int], prompt_tokens: int, now_s: float) -> int:
        """Cached tokens of a prompt with these block hashes; the prompt is remembered."""
        p = self.params
        if prompt_tokens < p.prompt_cache_min_tokens:
            return 0
        # As the engine: the last prompt token is always computed, so never the whole prompt.
        usable = hashes[: (prompt_tokens - 1) // p.prompt_cache_step_tokens]
        matched = 0
        for block_hash in usable:
            seen_s = self._seen.get(block_hash)
            if seen_s is None or now_s - seen_s > p.prompt_cache_ttl_s:
                break
            matched += 1
        self._remember(usable, now_s)
        cached = matched * p.prompt_cache_step_tokens
        return cached if cached >= p.prompt_cache_min_tokens else 0

    def _remember(self, hashes: Sequence[int], now_s: float) -> None:
        seen = self._seen
        for block_hash in hashes:
            seen[block_hash] = now_s
            seen.move_to_end(block_hash)
        while len(seen) > self.params.prompt_cache_blocks:
            seen.popitem(last=False)


class ProviderRuntime:
    """The TokenSource of a hosted provider: sleeps for drawn latencies, enforces the limit."""

    owned_by = "openai"
    max_model_len: int | None = None  # a hosted provider's /v1/models does not say

    def __init__(
        self, params: ProviderParams, faults: FaultState, clock: Callable[[], float]
    ) -> None:
        self.params = params
        self._faults = faults
        self._clock = clock
        self._latency = ProviderLatency(params, random.Random(params.seed))
        self._prompt_cache = HostedPromptCache(params)
        self.rate_limited = 0
        self.cached_tokens_total = 0

    def refuse(self, request: CompletionRequest, in_progress: int) -> Response | None:
        if in_progress < self.params.max_concurrency:
            return None
        self.rate_limited += 1
        return error_response(
            429,
            "Rate limit reached for requests. Please try again later.",
            "requests",
            code="rate_limit_exceeded",
            **{"retry-after": str(math.ceil(self.params.retry_after_s))},
            **self._limit_headers(remaining=0),
        )

    def headers(self, in_progress: int) -> dict[str, str]:
        return self._limit_headers(remaining=max(0, self.params.max_concurrency - in_progress))

    async def tokens(
        self, request: CompletionRequest, details: PromptDetails
    ) -> AsyncGenerator[int, None]:
        details.cached_tokens = self._cached_tokens(request)
        self.cached_tokens_total += details.cached_tokens
        ttft_s, tpot_s = self._latency.draw(request.prompt_tokens, details.cached_tokens)
        await asyncio.sleep(ttft_s * self._faults.slowdown(self._clock()))
        yield 0
        for index in range(1, request.max_tokens):
            await asyncio.sleep(tpot_s * self._faults.slowdown(self._clock()))
            yield index

    def stats(self) -> dict[str, Any]:
        return {"rate_limited": self.rate_limited, "cached_tokens_total": self.cached_tokens_total}

    def _cached_tokens(self, request: CompletionRequest) -> int:
        text, salt, prompt = request.prompt_text, request.cache_salt, request.prompt_tokens
        return self._prompt_cache.lookup(text, salt, prompt, self._clock())

    def _limit_headers(self, *, remaining: int) -> dict[str, str]:
        return {
            "x-ratelimit-limit-requests": str(self.params.max_concurrency),
            "x-ratelimit-remaining-requests": str(remaining),
            "x-ratelimit-reset-requests": go_duration(self.params.retry_after_s),
        }


def create_provider_app(
    params: ProviderParams | None = None, *, clock: Callable[[], float] = time.monotonic
) -> Starlette:
    """The ASGI app of one simulated hosted provider."""
    params = params or ProviderParams()
    faults = FaultState(params.faults, now_s=clock(), seed=params.seed)
    runtime = ProviderRuntime(params, faults, clock)
    options = FrontendOptions(
        model=params.model,
        api_key=params.api_key,
        strict_model=params.strict_model,
        default_max_tokens=params.default_max_tokens,
        separate_finish=params.separate_finish,
        details_mode="always",
    )
    frontend = Frontend(options, runtime, faults, clock)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        faults.update({}, now_s=clock())  # slowdown_at_s counts from the server start
        yield

    app = Starlette(routes=[*frontend.routes(), *ApiRoutes(frontend).routes()], lifespan=lifespan)
    app.state.runtime = runtime
    app.state.frontend = frontend
    return app

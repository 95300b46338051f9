"""A simulated vLLM OpenAI server: the `EngineModel` stepped in real time behind HTTP.

One background task, started by the app lifespan, runs the model: it steps, sleeps for the
step's duration (deadline-based, so scheduling jitter does not accumulate), then hands each
emitted token to the waiting request. A request whose client leaves is cancelled in the model,
which frees its KV blocks at once, as vLLM aborts a disconnected request.

With prefix caching on (the default), each request's block hashes are computed once, at
submission, over its rendered prompt and the output it will generate (`prompt_blocks.py`), and
the tokens found cached come back as `usage.prompt_tokens_details.cached_tokens`, as vLLM
reports them with `--enable-prompt-tokens-details` (on here unless turned off).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gateway.sim.api_routes import ApiRoutes
from gateway.sim.engine_metrics import EngineMetrics
from gateway.sim.faults import Faults, FaultState
from gateway.sim.frontend import Frontend, FrontendOptions, error_response
from gateway.sim.model import EngineModel, EngineParams, StepResult
from gateway.sim.prompt_blocks import sequence_hashes
from gateway.sim.wire import CompletionRequest, PromptDetails


class EngineServerParams(EngineParams):
    """EngineParams plus what the HTTP server needs: served model name, metrics flavour, faults."""

    model: str = "meta-llama/Meta-Llama-3-8B-Instruct"
    strict_model: bool = True  # 404 for any other model name, as vLLM does
    api_key: str | None = None
    default_max_tokens: int = Field(default=64, ge=1)
    legacy_metrics: bool = False
    enable_prompt_tokens_details: bool = True
    seed: int | None = None
    faults: Faults = Faults()


@dataclass(slots=True)
class _Pending:
    """A request inside the model, with the timing its histograms need."""

    prompt_tokens: int
    arrival_s: float
    details: PromptDetails
    queue: asyncio.Queue[int] = field(default_factory=asyncio.Queue)
    first_token_s: float | None = None
    last_token_s: float = 0.0
    tokens: int = 0


class EngineRuntime:
    """The model loop plus the TokenSource the frontend reads tokens from."""

    owned_by = "vllm"

    def __init__(
        self, params: EngineServerParams, faults: FaultState, clock: Callable[[], float]
    ) -> None:
        self.params = params
        self.max_model_len: int | None = params.max_model_len
        self.model = EngineModel(params)
        self.metrics = EngineMetrics(
            params.model, self.model.snapshot, legacy=params.legacy_metrics
        )
        self._faults = faults
        self._clock = clock
        self._pending: dict[str, _Pending] = {}
        self._wake = asyncio.Event()

    async def run(self) -> None:
        deadline_s = self._clock()
        while True:
            if not self.model.has_work:
                await self._wake.wait()
                self._wake.clear()
                continue
            self.model.slowdown = self._faults.slowdown(self._clock())
            result = self.model.step()
            deadline_s = max(deadline_s, self._clock()) + result.duration_s
            await asyncio.sleep(max(0.0, deadline_s - self._clock()))
            self._deliver(result)

    def refuse(self, request: CompletionRequest, in_progress: int) -> Response | None:
        total = request.prompt_tokens + request.max_tokens
        if total <= self.params.max_model_len:
            return None
        return error_response(
            400,
            f"This model's maximum context length is {self.params.max_model_len} tokens. "
            f"However, you requested {total} tokens ({request.prompt_tokens} in the messages, "
            f"{request.max_tokens} in the completion).",
            "BadRequestError",
        )

    def headers(self, in_progress: int) -> dict[str, str]:
        return {}

    async def tokens(
        self, request: CompletionRequest, details: PromptDetails
    ) -> AsyncGenerator[int, None]:
        req_id = request.request_id
        pending = _Pending(request.prompt_tokens, self._clock(), details)
        hashes = self._block_hashes(request)
        self.model.submit(req_id, request.prompt_tokens, request.max_tokens, hashes)
        self._pending[req_id] = pending
        self._wake.set()
        try:
            for _ in range(request.max_tokens):
                yield await pending.queue.get()
        finally:
            if self._pending.pop(req_id, None) is not None and self.model.cancel(req_id):
                self._finish(pending, "abort")

    def stats(self) -> dict[str, Any]:
        snap = self.model.snapshot()
        return {
            "running": snap.running,
            "waiting": snap.waiting,
            "kv_usage": snap.kv_usage,
            "preemptions_total": snap.preemptions_total,
            "prefix_cache_queries_total": snap.prefix_cache_queries_total,
            "prefix_cache_hits_total": snap.prefix_cache_hits_total,
        }

    def _block_hashes(self, request: CompletionRequest) -> tuple[int, ...]:
        p = self.params
        if not p.enable_prefix_caching:
            return ()
        text, salt = request.prompt_text, request.cache_salt
        return sequence_hashes(text, request.max_tokens, p.block_size, salt=salt)

    def _deliver(self, result: StepResult) -> None:
        now_s = self._clock()
        for req_id, cached_tokens in result.prefix_hits:
            hit = self._pending.get(req_id)
            if hit is not None:
                hit.details.cached_tokens = cached_tokens
        for req_id, index in result.tokens_emitted:
            pending = self._pending.get(req_id)
            if pending is not None:
                self._observe_token(pending, now_s)
                pending.queue.put_nowait(index)
        for req_id in result.finished:
            finished = self._pending.pop(req_id, None)
            if finished is not None:
                self._finish(finished, "length")

    def _observe_token(self, pending: _Pending, now_s: float) -> None:
        if pending.first_token_s is None:
            pending.first_token_s = now_s
            self.metrics.first_token(now_s - pending.arrival_s)
        else:
            self.metrics.token_gap(now_s - pending.last_token_s)
        pending.last_token_s = now_s
        pending.tokens += 1

    def _finish(self, pending: _Pending, reason: str) -> None:
        first_s = pending.first_token_s or pending.last_token_s
        self.metrics.finished(
            e2e_s=self._clock() - pending.arrival_s,
            decode_s=pending.last_token_s - first_s,
            prompt_tokens=pending.prompt_tokens,
            output_tokens=pending.tokens,
            reason=reason,
        )


def create_engine_app(
    params: EngineParams | None = None, *, clock: Callable[[], float] = time.monotonic
) -> Starlette:
    """The ASGI app of one simulated vLLM replica; its model loop lives in the lifespan."""
    server = _server_params(params)
    faults = FaultState(server.faults, now_s=clock(), seed=server.seed)
    runtime = EngineRuntime(server, faults, clock)
    options = FrontendOptions(
        model=server.model,
        api_key=server.api_key,
        strict_model=server.strict_model,
        default_max_tokens=server.default_max_tokens,
        details_mode="nonzero" if server.enable_prompt_tokens_details else "off",
    )
    frontend = Frontend(options, runtime, faults, clock)

    async def metrics(request: Request) -> Response:
        return Response(runtime.metrics.render(), media_type="text/plain; version=0.0.4")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        faults.update({}, now_s=clock())  # slowdown_at_s counts from the server start
        task = asyncio.create_task(runtime.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    routes = [
        *frontend.routes(),
        *ApiRoutes(frontend).routes(),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.runtime = runtime
    app.state.frontend = frontend
    return app


def _server_params(params: EngineParams | None) -> EngineServerParams:
    if isinstance(params, EngineServerParams):
        return params
    if params is None:
        return EngineServerParams()
    return EngineServerParams.model_validate(params.model_dump())

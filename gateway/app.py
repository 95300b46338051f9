"""create_app(config): the ASGI app. Its lifespan builds the runtime and owns every task."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from gateway import api, dashboard, logs, ops, tracing
from gateway.errors import GatewayError, InvalidRequest
from gateway.observe import RequestObserver
from gateway.reload import ConfigReloader
from gateway.runtime import Runtime
from gateway.settings import GatewayConfig, Settings
from gateway.stats.base import StatsStore
from gateway.telemetry import log


def create_app(
    config: GatewayConfig,
    settings: Settings | None = None,
    store: StatsStore | None = None,
    config_path: Path | None = None,
) -> FastAPI:
    """`config_path`, when given, is watched (and re-read on SIGHUP) for hot reloads."""
    settings = settings or Settings()
    tracing.configure()
    if settings.request_log:
        logs.configure()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = Runtime.build(config, settings, store)
        app.state.runtime = runtime
        runtime.start()
        app.state.history = dashboard.watch(runtime, settings.dashboard_sample_s)
        if config_path is not None:
            _watch(runtime, config_path)
        try:
            yield
        finally:
            await runtime.close()

    app = FastAPI(
        title="slo-gateway",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        # FastAPI's own OpenTelemetry stays off: gateway/tracing.py makes the spans, and the
        # check alone (three global provider lookups per request) cost ~4% of a request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
        exception_handlers={
            GatewayError: _gateway_error,
            HTTPException: _http_error,
            RequestValidationError: _validation_error,
            Exception: _unexpected,
        },
    )
    app.router.routes.extend(api.routes)
    app.include_router(api.documented)  # behind the served routes: documentation only
    app.include_router(ops.routes)
    app.include_router(dashboard.routes)
    app.add_middleware(
        RequestObserver, request_log=settings.request_log, log_prompts=settings.log_prompts
    )
    return app


def _watch(runtime: Runtime, path: Path) -> None:
    reloader = ConfigReloader(path, runtime)
    runtime.tasks.append(asyncio.create_task(reloader.run()))
    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reloader.reload)
    except (RuntimeError, ValueError):
        log.info("SIGHUP reload unavailable off the main thread; watching %s only", path)


async def _gateway_error(request: Request, exc: GatewayError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


async def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
    error = GatewayError(str(exc.detail), code=f"http_{exc.status_code}")
    error.status = exc.status_code
    error.type = "invalid_request_error" if exc.status_code < 500 else "server_error"
    return JSONResponse(error.body(), status_code=exc.status_code, headers=exc.headers)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    error = InvalidRequest(f"Invalid request: {exc.errors()}", code="invalid_value")
    return JSONResponse(error.body(), status_code=error.status)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unexpected error on %s", request.url.path)
    error = GatewayError("The gateway hit an internal error.", code="internal_error")
    return JSONResponse(error.body(), status_code=500)

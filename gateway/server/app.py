"""create_app(config): the ASGI app. Its lifespan builds the runtime and owns every task.

No path redirects (Starlette's slash redirects point at whatever Host the client sent): an
unknown path, with or without a trailing slash, is a 404 in OpenAI's error shape. A client that
leaves while sending its body is a 499 (`cancelled` in the request log), or the 408 it was sent
when its body was too slow (gateway/server/http_protocol.py), never a 500.
"""

from __future__ import annotations

import asyncio
import gc
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.config.settings import GatewayConfig, Settings
from gateway.errors import GatewayError, InvalidRequest
from gateway.server import (
    anthropic_routes,
    control_routes,
    dashboard,
    model_routes,
    openai_routes,
    ops,
    responses_routes,
    usage_routes,
)
from gateway.server.http_protocol import BODY_TIMED_OUT, too_slow
from gateway.server.membership import Membership
from gateway.server.middleware import RequestMiddleware
from gateway.server.openai_routes import Handler
from gateway.server.reload import ConfigReloader
from gateway.server.runtime import Runtime
from gateway.state.store import StatsStore
from gateway.telemetry import access_log, audit, request_log, tracing
from gateway.telemetry.metrics import Metrics, log

GC_YOUNG_OBJECTS = 20_000  # CPython's default is 700
Renderer = Callable[[Request, GatewayError], Awaitable[Response]]
# The API POST routes, served past FastAPI (GatewayApp): path -> (handler, error renderer).
DIRECT: dict[str, tuple[Handler, Renderer]] = {
    **{path: (h, openai_routes.render_error) for path, h in openai_routes.POSTS.items()},
    **{path: (h, openai_routes.render_error) for path, h in responses_routes.POSTS.items()},
    **{path: (h, anthropic_routes.render_error) for path, h in anthropic_routes.POSTS.items()},
}


def create_app(
    config: GatewayConfig,
    settings: Settings | None = None,
    store: StatsStore | None = None,
    config_path: Path | None = None,
) -> FastAPI:
    """`config_path`, when given, is watched (and re-read on SIGHUP) for hot reloads."""
    settings = settings or Settings()
    tracing.configure()
    access_log.strip_queries()
    if settings.request_log:
        request_log.configure()
    audit.configure()
    metrics = Metrics()  # the middleware counts every request; the runtime the rest

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = Runtime.build(config, settings, store, metrics)
        app.state.runtime = runtime
        runtime.start()
        runtime.tasks += [asyncio.create_task(job) for job in Membership(runtime).jobs()]
        app.state.history = dashboard.watch(runtime, settings.dashboard_sample_s)
        if config_path is not None:
            _watch(runtime, config_path)
        _settle_heap()
        try:
            yield
        finally:
            await runtime.close()

    app = GatewayApp(
        title="slo-gateway",
        lifespan=lifespan,
        redirect_slashes=False,
        docs_url=None,
        redoc_url=None,
        # FastAPI's own OpenTelemetry stays off: gateway/telemetry/tracing.py makes the spans, and
        # the check alone (three global provider lookups per request) cost ~4% of a request.
        telemetry={"tracing": False, "metrics": False, "logs": False},
        exception_handlers={
            GatewayError: _gateway_error,
            ClientDisconnect: _client_left,
            HTTPException: _http_error,
            RequestValidationError: _validation_error,
            Exception: _unexpected,
        },
    )
    # The API POST routes are included only for docs and 405s (GatewayApp serves them).
    for api in (openai_routes, responses_routes, anthropic_routes):
        app.include_router(api.documented)
    app.include_router(model_routes.routes)
    app.include_router(ops.routes)
    app.include_router(usage_routes.routes)
    app.include_router(control_routes.routes)
    app.include_router(dashboard.routes)
    logs = {"request_log": settings.request_log, "log_prompts": settings.log_prompts}
    app.add_middleware(RequestMiddleware, metrics=metrics, **logs)
    app.direct = RequestMiddleware(_serve_direct, metrics=metrics, **logs)
    return app


class GatewayApp(FastAPI):
    """FastAPI, except that the API POST routes (the hot path) go straight to their handler
    under the request observer, skipping FastAPI's and Starlette's middleware stack, router and
    per-route wrappers: together about 15% of a relayed request. What those layers do for the
    hot path is done here: errors are rendered by the same handlers, and the routes are still
    documented (and answer 405 to other methods) through FastAPI."""

    direct: ASGIApp

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] in DIRECT:
            scope["app"] = self
            await self.direct(scope, receive, send)
        else:
            await super().__call__(scope, receive, send)


async def _serve_direct(scope: Scope, receive: Receive, send: Send) -> None:
    """The route answers; an error raised before its response started is rendered here, in
    the route's API's shape."""
    request = Request(scope, receive)
    handler, render = DIRECT[scope["path"]]
    response: Response
    try:
        await handler(request, send)
        return
    except GatewayError as exc:
        response = await render(request, exc)
    except ClientDisconnect as exc:
        response = await _client_left(request, exc)
    except Exception as exc:
        response = await render(request, _internal(request, exc))
    await response(scope, receive, send)


def _settle_heap() -> None:
    """Keep the cyclic garbage collector off the request path. Measured under 64 requests in
    flight, it took 17% of the gateway's CPU: every 700 net container allocations (a few
    requests' worth) it scanned the young objects, nearly all of them live requests that
    survive, and every full collection scanned the whole startup heap (settings, Pydantic
    models, Prometheus, the routes). Freezing what startup built takes that heap out of every
    collection, and a young generation larger than what the requests in flight hold keeps
    collections for real garbage (cycles are rare; reference counting frees the rest)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_OBJECTS, 20, 20)


def _watch(runtime: Runtime, path: Path) -> None:
    reloader = ConfigReloader(path, runtime)
    runtime.tasks.append(asyncio.create_task(reloader.run()))
    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reloader.reload)
    except (RuntimeError, ValueError):
        log.info("SIGHUP reload unavailable off the main thread; watching %s only", path)


def _renderer(request: Request) -> Renderer:
    """Anthropic's error shape on its routes (and for a models call that sent its version
    header), else OpenAI's."""
    path = request.url.path
    if path.startswith("/v1/messages") or (
        path.startswith("/v1/models") and "anthropic-version" in request.headers
    ):
        return anthropic_routes.render_error
    return openai_routes.render_error


async def _gateway_error(request: Request, exc: GatewayError) -> Response:
    return await _renderer(request)(request, exc)


async def _client_left(request: Request, exc: ClientDisconnect) -> Response:
    """Nobody reads this answer; the status is what the request log and metrics record."""
    timeout_s = request.scope.get("state", {}).get(BODY_TIMED_OUT)
    if timeout_s is not None:
        return await _gateway_error(request, too_slow("body", timeout_s))
    return Response(status_code=499)


async def _http_error(request: Request, exc: HTTPException) -> Response:
    headers = dict(exc.headers) if exc.headers else None
    error = GatewayError(str(exc.detail), code=f"http_{exc.status_code}", headers=headers)
    error.status = exc.status_code
    error.type = "invalid_request_error" if exc.status_code < 500 else "server_error"
    return await _renderer(request)(request, error)


async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
    error = InvalidRequest(f"Invalid request: {exc.errors()}", code="invalid_value")
    return await _renderer(request)(request, error)


async def _unexpected(request: Request, exc: Exception) -> Response:
    return await _renderer(request)(request, _internal(request, exc))


def _internal(request: Request, exc: Exception) -> GatewayError:
    log.exception("unexpected error on %s", request.url.path)
    return GatewayError("The gateway hit an internal error.", code="internal_error")

"""Operational routes: liveness, readiness, Prometheus metrics."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway.runtime import Runtime

routes = APIRouter()


@routes.get("/healthz")
async def healthz() -> JSONResponse:
    return JSONResponse({"status": "ok"})


@routes.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    """Ready when at least one endpoint is in rotation; the detail says which are not."""
    runtime: Runtime = request.app.state.runtime
    now = time.time()
    endpoints = {
        eid: "available" if runtime.registry.available(eid, now) else "cooling_down"
        for eid in runtime.registry.endpoints
    }
    ready = "available" in endpoints.values()
    body = {"ready": ready, "store": runtime.store_kind, "endpoints": endpoints}
    return JSONResponse(body, status_code=200 if ready else 503)


@routes.get("/metrics")
async def metrics(request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    now = time.time()
    for eid in runtime.registry.endpoints:
        runtime.metrics.endpoint_healthy.labels(eid).set(runtime.registry.available(eid, now))
    return Response(generate_latest(runtime.metrics.registry), media_type=CONTENT_TYPE_LATEST)

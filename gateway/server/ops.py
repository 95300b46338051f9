"""Operational routes: liveness, readiness, Prometheus metrics, and the admin views."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.core.candidates import rotation_phase
from gateway.server.runtime import Runtime
from gateway.telemetry.metrics import exposition

routes = APIRouter()


@routes.get("/healthz")
@routes.get("/health")  # what clients written for vLLM (GuideLLM) probe a target with
async def healthz() -> JSONResponse:
    return JSONResponse({"status": "ok"})


@routes.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    """Ready when at least one endpoint is in rotation; the detail says which are not and
    whether shared state is served by Redis or, during an outage, by this replica alone."""
    runtime: Runtime = request.app.state.runtime
    endpoints = {eid: phase(runtime, eid) for eid in runtime.registry.endpoints}
    ready = "available" in endpoints.values()
    body = {
        "ready": ready,
        "store": runtime.store_kind,
        "shared_state": "up" if runtime.shared_state_up else "degraded_to_local",
        "pid": os.getpid(),  # which worker answered, under `serve --workers N`
        "endpoints": endpoints,
    }
    return JSONResponse(body, status_code=200 if ready else 503)


def phase(runtime: Runtime, endpoint_id: str) -> str:
    return rotation_phase(runtime.registry, runtime.view, endpoint_id, time.time())


@routes.get("/metrics")
async def metrics(request: Request) -> Response:
    """Prometheus text; a Bearer token when `server.metrics_token_env` is set (it shows tenant
    names, endpoint ids and request counts: docs/observability.md)."""
    runtime: Runtime = request.app.state.runtime
    runtime.keyring.require_metrics(request.headers.get("authorization"))
    m = runtime.metrics
    m.usage.flush()
    now = time.time()
    m.redis_up.set(1 if runtime.store_kind == "redis" and runtime.shared_state_up else 0)
    for eid in runtime.registry.endpoints:
        m.endpoint_healthy.labels(eid).set(phase(runtime, eid) == "available")
        breaker = runtime.view.stats(eid).breaker.phase(now)
        m.breaker_open.labels(eid).set(breaker != "closed")
        signals = runtime.scraper.signals(eid)
        if signals is not None and signals.kv_usage is not None:
            m.engine_kv_usage.labels(eid).set(signals.kv_usage)
        if signals is not None and signals.waiting is not None:
            m.engine_waiting.labels(eid).set(signals.waiting)
    return Response(exposition(m.registry), media_type=CONTENT_TYPE_LATEST)


@routes.get("/admin/endpoints")
async def admin_endpoints(request: Request) -> JSONResponse:
    """Every endpoint's scraped state, estimates, quantiles and breaker, with signal ages."""
    runtime: Runtime = request.app.state.runtime
    runtime.keyring.require_admin(request.headers.get("authorization"))
    return JSONResponse({"at_s": time.time(), "endpoints": endpoint_views(runtime)})


def endpoint_views(runtime: Runtime) -> list[dict[str, Any]]:
    now = time.time()
    refreshed = runtime.view.refreshed_at_s
    views = []
    for eid, endpoint in runtime.registry.endpoints.items():
        stats = runtime.view.stats(eid)
        signals = runtime.scraper.signals(eid)
        probe = runtime.health.last_probes.get(eid)
        views.append(
            {
                "id": eid,
                "kind": endpoint.kind,
                "models": sorted(endpoint.models),
                "phase": phase(runtime, eid),
                "in_flight": stats.in_flight,
                # this replica's in-flight uncached prompt tokens before their first token
                "prefill_tokens": runtime.view.local_prefill[eid],
                "saturation": _name(runtime.admission.states.get(eid)),
                "engine": signals._asdict() if signals else None,
                "estimate": dataclasses.asdict(stats.latency),
                "estimate_age_s": None if refreshed is None else round(now - refreshed, 3),
                "breaker": dataclasses.asdict(stats.breaker) | {"phase": stats.breaker.phase(now)},
                "cooldown_until_s": max(
                    stats.cooldown_until_s, runtime.registry.state(eid).cooldown_until_s
                ),
                "last_probe": dataclasses.asdict(probe) if probe else None,
                "probe_age_s": None if probe is None else round(now - probe.at_s, 3),
            }
        )
    return views


def _name(state: Any) -> str:
    return state.name.lower() if state is not None else "open"


@routes.get("/admin/decisions")
async def admin_decisions(request: Request) -> JSONResponse:
    """The most recent routing decisions (bounded, newest last)."""
    runtime: Runtime = request.app.state.runtime
    runtime.keyring.require_admin(request.headers.get("authorization"))
    return JSONResponse({"decisions": list(runtime.decisions)})

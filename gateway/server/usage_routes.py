"""GET /admin/usage: tenants' requests, tokens and cost over a time range, grouped, as JSON or
CSV (`format=csv`, or GET /admin/usage.csv). Admin key only, like every /admin view.

The store keeps usage in UTC-hour buckets (gateway/state/usage.py), shared by every replica over
Redis: `since` and `until` (ISO 8601, or unix seconds) are widened to whole hours, and the answer
says the hours it covers. `group_by` is any of tenant, class, model, endpoint, hour (default
tenant); the totals are over everything in range.
"""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from gateway.core.accounting import usd
from gateway.errors import InvalidRequest
from gateway.server.runtime import Runtime
from gateway.state.usage import HOUR_S, METRICS, UsageRow

routes = APIRouter()
GROUPS = {"tenant", "class", "model", "endpoint", "hour"}
DEFAULT_RANGE_S = 86400.0
COLUMNS = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens", "cost_usd")


@routes.get("/admin/usage")
async def admin_usage(request: Request) -> Response:
    return await _usage(request, request.query_params.get("format", "json"))


@routes.get("/admin/usage.csv")
async def admin_usage_csv(request: Request) -> Response:
    return await _usage(request, "csv")


async def _usage(request: Request, fmt: str) -> Response:
    runtime: Runtime = request.app.state.runtime
    runtime.keyring.require_admin(request.headers.get("authorization"))
    query = request.query_params
    if fmt not in ("json", "csv"):
        raise InvalidRequest("format must be json or csv.", code="invalid_value", param="format")
    now = time.time()
    until = _moment(query.get("until"), "until", now)
    since = _moment(query.get("since"), "since", until - DEFAULT_RANGE_S)
    group_by = _group_by(query.get("group_by", "tenant"))
    since_hour, until_hour = math.floor(since / HOUR_S), math.ceil(until / HOUR_S)
    retention_h = math.ceil(runtime.config.state.usage_retention_days * 24)
    if since_hour >= until_hour or until_hour - since_hour > retention_h + 1:
        raise InvalidRequest(
            "since must be before until, at most usage_retention_days "
            f"({runtime.config.state.usage_retention_days:g}) apart.",
            code="invalid_value",
            param="since",
        )
    runtime.admission.flush_usage()  # a single replica's batched usage, settled first
    # the config's tenants and the admin API's (a deleted one's usage is no longer listed)
    found = await runtime.store.usage(
        sorted(runtime.keyring.tenants), since_hour=since_hour, until_hour=until_hour
    )
    groups = grouped(found, group_by)
    if fmt == "csv":
        return Response(to_csv(groups, group_by), media_type="text/csv; charset=utf-8")
    body = {
        "since": _iso(since_hour * HOUR_S),
        "until": _iso(until_hour * HOUR_S),
        "group_by": group_by,
        "groups": groups,
        "totals": _row(sum_metrics(found)),
    }
    return JSONResponse(body)


def _moment(value: str | None, name: str, default: float) -> float:
    """ISO 8601 (no zone: UTC) or unix seconds."""
    if value is None or value == "":
        return default
    try:
        return float(value)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise InvalidRequest(
            f"{name} must be ISO 8601 (2025-01-31T00:00:00Z) or unix seconds; got {value!r}.",
            code="invalid_value",
            param=name,
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def _group_by(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = sorted(set(names) - GROUPS)
    if unknown or not names:
        raise InvalidRequest(
            f"group_by takes a comma-separated list of {', '.join(sorted(GROUPS))}; "
            f"unknown: {', '.join(unknown) or '(empty)'}.",
            code="invalid_value",
            param="group_by",
        )
    return list(dict.fromkeys(names))


def _key(row: UsageRow, name: str) -> str:
    if name == "hour":
        return _iso(row.hour * HOUR_S)
    return {"tenant": row.tenant, "class": row.slo_class, "model": row.model}.get(
        name, row.endpoint
    )


def grouped(found: Iterable[UsageRow], group_by: Sequence[str]) -> list[dict[str, Any]]:
    sums: dict[tuple[str, ...], dict[str, int]] = {}
    for row in found:
        key = tuple(_key(row, name) for name in group_by)
        into = sums.setdefault(key, dict.fromkeys(METRICS, 0))
        for metric, amount in row.metrics.items():
            into[metric] = into.get(metric, 0) + amount
    return [dict(zip(group_by, key, strict=True)) | _row(sums[key]) for key in sorted(sums)]


def sum_metrics(found: Iterable[UsageRow]) -> dict[str, int]:
    total = dict.fromkeys(METRICS, 0)
    for row in found:
        for metric, amount in row.metrics.items():
            total[metric] = total.get(metric, 0) + amount
    return total


def _row(metrics: dict[str, int]) -> dict[str, Any]:
    """Metrics as shown: cost in USD (its exact pico-USD integer kept beside it)."""
    shown: dict[str, Any] = {m: metrics.get(m, 0) for m in METRICS if m != "cost_pusd"}
    return shown | {"cost_usd": usd(metrics.get("cost_pusd", 0)), "cost_pusd": metrics["cost_pusd"]}


def to_csv(groups: Sequence[dict[str, Any]], group_by: Sequence[str]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*group_by, *COLUMNS])
    for group in groups:
        writer.writerow([*(group[name] for name in group_by), *(group[c] for c in COLUMNS)])
    return out.getvalue()


def _iso(at_s: float) -> str:
    return datetime.fromtimestamp(at_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

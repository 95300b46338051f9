"""The Grafana dashboard queries only metrics the gateway exports, and covers what operators need.

Exported names come from a fresh `gateway.telemetry.metrics.Metrics()` registry: a counter `x` is
queried as `x_total`, a histogram as `x_bucket`, `x_sum` or `x_count`, a gauge as `x`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from gateway.telemetry.metrics import Metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "slo-gateway.json"

# Metrics the dashboard uses that other issues add to gateway/telemetry/metrics.py (names
# agreed there).
# Until they are exported, test_every_queried_metric_is_exported fails and names them.
PLANNED_METRICS = [
    "slo_gateway_slo_total",  # counter {slo_class, tenant, endpoint, result=met|missed}
    "slo_gateway_shed_total",  # counter {slo_class, tenant, reason}
    "slo_gateway_queued_total",  # counter {slo_class}
    "slo_gateway_queue_depth",  # gauge
    "slo_gateway_redis_up",  # gauge, 1 when this replica reaches Redis
    "slo_gateway_engine_kv_usage",  # gauge {endpoint}, 0..1
    "slo_gateway_engine_waiting",  # gauge {endpoint}
    "slo_gateway_breaker_open",  # gauge {endpoint}
]

SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("_sum", "_count", ""),
    "gauge": ("",),
}
METRIC = re.compile(r"\bslo_gateway_[a-z0-9_]+\b")


def exported_series() -> set[str]:
    names: set[str] = set()
    for family in Metrics().registry.collect():
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
    return names


def dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text())
    assert isinstance(data, dict)
    return data


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def queries() -> list[str]:
    exprs = [t["expr"] for p in panels() for t in p.get("targets", [])]
    for variable in dashboard()["templating"]["list"]:
        query = variable.get("query")
        if variable["type"] == "query":
            exprs.append(query["query"] if isinstance(query, dict) else query)
    return exprs


def queried_metrics() -> set[str]:
    return {name for expr in queries() for name in METRIC.findall(expr)}


def test_every_queried_metric_is_exported() -> None:
    missing = queried_metrics() - exported_series()
    planned = sorted(missing & set(PLANNED_METRICS))
    unknown = sorted(missing - set(PLANNED_METRICS))
    assert not missing, f"not exported by Metrics(): planned {planned}, unknown {unknown}"


def test_every_query_reads_a_gateway_metric() -> None:
    for expr in queries():
        assert METRIC.search(expr), f"query reads no slo_gateway_ metric: {expr}"


def test_covers_slo_latency_load_admission_and_health() -> None:
    wanted = {
        "slo_gateway_slo_total",
        "slo_gateway_ttft_seconds_bucket",
        "slo_gateway_tpot_seconds_bucket",
        "slo_gateway_in_flight",
        "slo_gateway_queue_depth",
        "slo_gateway_shed_total",
        "slo_gateway_endpoint_healthy",
        "slo_gateway_redis_up",
    }
    assert wanted <= queried_metrics()
    exprs = "\n".join(queries())
    for quantile in ("0.5", "0.95", "0.99"):
        assert f"histogram_quantile({quantile}, sum by (le, endpoint) " in exprs
    assert "sum by (slo_class)" in exprs and "sum by (tenant)" in exprs


def test_quantiles_aggregate_buckets_by_le() -> None:
    quantile_exprs = [expr for expr in queries() if "histogram_quantile" in expr]
    assert quantile_exprs
    for expr in quantile_exprs:
        assert re.search(r"sum by \(le\b", expr), expr
        assert re.search(r"_seconds_bucket\b", expr), expr


def test_exported_names_follow_the_exposition_suffixes() -> None:
    names = exported_series()
    assert {"slo_gateway_requests_total", "slo_gateway_in_flight"} <= names
    assert {"slo_gateway_ttft_seconds_bucket", "slo_gateway_ttft_seconds_count"} <= names
    assert "slo_gateway_requests" not in names


def test_panels_have_unique_ids_and_do_not_overlap() -> None:
    every = dashboard()["panels"]
    ids = [p["id"] for p in every]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for panel in every:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        columns = range(grid["x"], grid["x"] + grid["w"])
        area = {(x, y) for x in columns for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not area & cells, f"panel {panel['title']!r} overlaps another"
        cells |= area


def test_every_panel_uses_the_datasource_variable() -> None:
    names = [v["name"] for v in dashboard()["templating"]["list"]]
    assert names == ["datasource", "tenant", "slo_class", "endpoint"]
    for panel in panels():
        assert panel["datasource"]["uid"] == "${datasource}"
        assert all(t["datasource"]["uid"] == "${datasource}" for t in panel["targets"])

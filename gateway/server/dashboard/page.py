"""The dashboard page, rendered on the server from the same document the JSON endpoint serves.

Without JavaScript the page is complete (numbers and sparklines as of the render) and reloads
itself every 5 s. With it, static/dashboard.js polls GET /admin/dashboard.json and rewrites every
element that carries `data-k` (a path into the document, or into the row's item for elements in a
`data-list` row) formatted by `data-f`, redraws the sparklines and rebuilds the decision rows.
The formats here and in dashboard.js must agree.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

SPARK_W, SPARK_H, SPARK_TOP = 120, 30, 9  # px; the top band holds the scale label
NO_VALUE = "–"
ID_SHOWN = 12  # characters of a request id, its end (`short_id`)


def _ms(value: float) -> str:
    ms = value * 1e3
    return f"{ms:.1f} ms" if ms < 10 else f"{ms:.0f} ms"


def _num(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def _age(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def _reasons(value: Mapping[str, int]) -> str:
    return " · ".join(f"{reason} {n}" for reason, n in value.items()) or NO_VALUE


FORMATS: dict[str, Callable[[Any], str]] = {
    "text": str,
    "num": _num,
    "ms": _ms,
    "pct": lambda v: f"{v * 100:.0f}%",
    "age": _age,
    "reasons": _reasons,
    "usd": lambda v: f"${v:.4f}" if v < 1 else f"${v:,.2f}",
}


def get(item: Mapping[str, Any], path: str) -> Any:
    value: Any = item
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def fmt(value: Any, kind: str) -> str:
    return NO_VALUE if value is None else FORMATS[kind](value)


def cell(item: Mapping[str, Any], path: str, kind: str = "text") -> str:
    text = html.escape(fmt(get(item, path), kind))
    return f'<span data-k="{path}" data-f="{kind}">{text}</span>'


def spark(item: Mapping[str, Any], names: Sequence[str], now_s: float, span_s: float) -> str:
    """Observed (solid) and predicted (dashed) p95 over the history span; scale at top left."""
    history = item["history"]
    top = max((v for n in names for v in history[n] if v is not None), default=0.0)
    at_s = history["at_s"]
    lines = "".join(
        f'<polyline class="{cls}" points="{points(at_s, history[name], top, now_s, span_s)}"/>'
        for name, cls in zip(names, ("obs", "pred"), strict=True)
    )
    label = html.escape(fmt(top or None, "ms"))
    return (
        f'<svg class="spark" viewBox="0 0 {SPARK_W} {SPARK_H}" width="{SPARK_W}" '
        f'height="{SPARK_H}" data-spark="{" ".join(names)}" role="img" '
        f'aria-label="observed vs predicted p95"><text x="1" y="7">{label}</text>{lines}</svg>'
    )


def points(
    at_s: Sequence[float], values: Sequence[float | None], top: float, now_s: float, span_s: float
) -> str:
    start_s = now_s - span_s
    coords = []
    for t, v in zip(at_s, values, strict=True):
        if v is not None and t >= start_s:
            x = SPARK_W * (t - start_s) / span_s
            y = SPARK_H - 1 - (SPARK_H - 1 - SPARK_TOP) * (v / top if top else 0.0)
            coords.append(f"{x:.1f},{y:.1f}")
    return " ".join(coords)


def render_page(doc: Mapping[str, Any]) -> str:
    return _PAGE.format(
        layout=html.escape(doc["layout"]),
        header=header(doc),
        endpoints=endpoint_table(doc),
        classes=class_table(doc),
        tenants=tenant_table(doc),
        keys=key_table(doc),
        decisions=decision_table(doc),
    )


def header(doc: Mapping[str, Any]) -> str:
    items = [
        ("policy", cell(doc, "policy")),
        ("store", cell(doc, "store")),
        ("shared state", cell(doc, "shared_state")),
        ("admission queue", cell(doc, "queue_depth", "num")),
        ("counts over the last", cell(doc, "window_s", "age")),
    ]
    return "".join(f"<div><dt>{name}</dt><dd>{value}</dd></div>" for name, value in items)


def _rows(list_name: str, items: Iterable[Mapping[str, Any]], row: Callable[..., str]) -> str:
    return "".join(
        f'<tr data-list="{list_name}" data-id="{html.escape(item.get("id") or item["name"])}"'
        f"{_health(item)}>{row(item)}</tr>"
        for item in items
    )


def _health(item: Mapping[str, Any]) -> str:
    return f' class="health-{item["health"]}"' if "health" in item else ""


def endpoint_table(doc: Mapping[str, Any]) -> str:
    def row(e: Mapping[str, Any]) -> str:
        return endpoint_row(e, doc["at_s"], doc["axis_s"])

    return _rows("endpoints", doc["endpoints"], row)


def endpoint_row(e: Mapping[str, Any], now_s: float, axis_s: float) -> str:
    kind = html.escape(e["kind"])
    return "".join(
        [
            f'<th scope="row">{html.escape(e["id"])}<small>{kind}</small></th>',
            f'<td><b class="badge">{cell(e, "status")}</b><small>breaker '
            f"{cell(e, 'breaker.phase')} · {cell(e, 'breaker.failures', 'num')} failures · "
            f"probe {cell(e, 'probe_age_s', 'age')} ago</small></td>",
            f'<td class="num">{cell(e, "in_flight", "num")}<small>live</small></td>',
            _engine(e),
            _latency(e, "ttft"),
            f"<td>{spark(e, ('ttft_p95_s', 'predicted_ttft_p95_s'), now_s, axis_s)}</td>",
            _latency(e, "tpot"),
            f"<td>{spark(e, ('tpot_p95_s', 'predicted_tpot_p95_s'), now_s, axis_s)}</td>",
            f'<td class="num">{cell(e, "estimate.samples", "num")}<small>'
            f"{cell(e, 'estimate.errors', 'num')} failed · "
            f"{cell(e, 'estimate_age_s', 'age')} old</small></td>",
        ]
    )


def _engine(e: Mapping[str, Any]) -> str:
    """Queue and KV cells; a hosted endpoint has no engine gauges, only in-flight leases."""
    if e["kind"] != "vllm":
        return '<td colspan="2"><small>hosted: no engine gauges; load is in-flight</small></td>'
    scraped = f"<small>scraped {cell(e, 'engine.age_s', 'age')} ago</small></td>"
    return (
        f'<td class="num">{cell(e, "engine.waiting", "num")} waiting · '
        f"{cell(e, 'engine.running', 'num')} running{scraped}"
        f'<td class="num"><meter min="0" max="1" low="0.7" high="0.85" optimum="0" '
        f'value="{get(e, "engine.kv_usage") or 0}" data-k="engine.kv_usage" '
        f'data-f="meter"></meter> {cell(e, "engine.kv_usage", "pct")}{scraped}'
    )


def _latency(e: Mapping[str, Any], name: str) -> str:
    return (
        f'<td class="num"><span class="obs">obs</span> {cell(e, f"estimate.{name}_p50_s", "ms")}'
        f' / {cell(e, f"estimate.{name}_p95_s", "ms")}<br><span class="pred">pred</span> '
        f"{cell(e, f'predicted.{name}_mean_s', 'ms')} / {cell(e, f'predicted.{name}_p95_s', 'ms')}"
        f"<small>within p95 {cell(e, f'coverage.{name}', 'pct')} of "
        f"{cell(e, f'coverage.{name}_n', 'num')}</small></td>"
    )


def _targets(c: Mapping[str, Any]) -> str:
    parts = [
        f"TTFT {c['ttft_ms']:g} ms" if c["ttft_ms"] else "",
        f"TPOT {c['tpot_ms']:g} ms" if c["tpot_ms"] else "",
        f"deadline {c['deadline_ms'] / 1e3:g} s" if c["deadline_ms"] else "",
    ]
    text = " · ".join(p for p in parts if p) or "no target"
    sheds = "sheddable" if c["sheddable"] else "queued when saturated"
    return f"{html.escape(text)}<small>priority {c['priority']} · {sheds}</small>"


def class_table(doc: Mapping[str, Any]) -> str:
    def row(c: Mapping[str, Any]) -> str:
        name = html.escape(c["name"])
        missed = f"<td>{cell(c, 'window.missed_by', 'reasons')}</td>"
        return f'<th scope="row">{name}</th><td>{_targets(c)}</td>{missed}{_counts(c, queued=True)}'

    return _rows("classes", doc["classes"], row)


def tenant_table(doc: Mapping[str, Any]) -> str:
    def row(t: Mapping[str, Any]) -> str:
        money = (
            f'<td class="num">{cell(t, "window.spend_usd", "usd")}<small>'
            f"{cell(t, 'total.spend_usd', 'usd')} since start</small></td>"
            f'<td class="num">{cell(t, "window.cost_per_1k_met_usd", "usd")}</td>'
        )
        fair = (
            f'<td class="num">{cell(t, "window.served_tokens", "num")}<small>'
            f"{cell(t, 'window.fair_waits', 'num')} waited for fairness</small></td>"
            f"<td>{cell(t, 'fair_share_tokens', 'reasons')}</td>"
        )
        name = f'<th scope="row">{html.escape(t["name"])}</th>'
        return name + _counts(t, queued=False) + money + fair

    return _rows("tenants", doc["tenants"], row)


def key_table(doc: Mapping[str, Any]) -> str:
    """The admin API's keys by tenant, masked, with spend and last use (over every replica)."""

    def row(k: Mapping[str, Any]) -> str:
        state = "revoked" if k["revoked_at"] else "live"
        return (
            f"<td>{html.escape(k['tenant'])}</td>"
            f'<th scope="row">{html.escape(k["masked"])}<small>{html.escape(k["id"])}</small></th>'
            f"<td>{html.escape(k['name'] or '')}</td><td>{state}</td>"
            f'<td class="num">{cell(k, "usage.requests", "num")}</td>'
            f'<td class="num">{cell(k, "usage.spend_usd", "usd")}</td>'
            f"<td>{cell(k, 'usage.last_used_hour')}</td>"
        )

    return _rows("keys", doc["keys"], row)


def _counts(item: Mapping[str, Any], *, queued: bool) -> str:
    cells = [
        f'<td class="num">{cell(item, "window.requests", "num")}</td>',
        f'<td class="num attain">{cell(item, "window.attainment", "pct")}<small>'
        f"{cell(item, 'window.missed', 'num')} missed</small></td>",
        f"<td>{cell(item, 'window.shed', 'reasons')}</td>",
        f"<td>{cell(item, 'window.errors', 'reasons')}</td>",
    ]
    if queued:
        cells.append(f'<td class="num">{cell(item, "window.queued", "num")}</td>')
    cells.append(
        f'<td class="num">{cell(item, "total.attainment", "pct")}<small>'
        f"{cell(item, 'total.requests', 'num')} req · {cell(item, 'total.shed_total', 'num')} "
        f"shed · {cell(item, 'total.errors_total', 'num')} not ok</small></td>"
    )
    return "".join(cells)


def decision_table(doc: Mapping[str, Any]) -> str:
    return "".join(decision_row(d, doc["at_s"]) for d in doc["decisions"])


def decision_row(d: Mapping[str, Any], now_s: float) -> str:
    chosen = d["ranking"][0] if d["ranking"] else NO_VALUE
    risk = ' class="at-risk"' if d.get("at_risk") else ""
    values = [
        f"{fmt(max(0.0, now_s - d['at_s']), 'age')} ago",
        short_id(d["request_id"]),
        d["tenant"],
        d["slo_class"],
        chosen,
        d["explanation"],
    ]
    return f"<tr{risk}>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in values) + "</tr>"


def short_id(request_id: str) -> str:
    """The end of a request id, where ids differ: the gateway's own are a per-process prefix
    and a counter (gateway/server/middleware.py), so their first characters are all alike."""
    return request_id if len(request_id) <= ID_SHOWN else "…" + request_id[-ID_SHOWN:]


def login(message: str) -> str:
    return _LOGIN.format(message=html.escape(message))


_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>slo-gateway dashboard</title>
<link rel="stylesheet" href="dashboard/static/dashboard.css">
<noscript><meta http-equiv="refresh" content="5"></noscript>
<script src="dashboard/static/dashboard.js" defer></script>
</head>
<body data-layout="{layout}" data-source="admin/dashboard.json">
<header>
<h1>slo-gateway</h1>
<dl class="summary">{header}</dl>
<p id="live">as rendered<noscript> · reloads every 5 s</noscript></p>
</header>
<main>
<section>
<h2>Endpoints</h2>
<table class="endpoints">
<thead><tr><th>Endpoint</th><th>Health</th><th>In flight</th><th>Engine queue</th>
<th>KV cache</th><th>TTFT p50 / p95</th><th>TTFT p95 trend</th><th>TPOT p50 / p95</th>
<th>TPOT p95 trend</th><th>Samples</th></tr></thead>
<tbody>{endpoints}</tbody>
</table>
<p class="legend"><span class="obs">obs</span>: measured over the store's window (all replicas)
· <span class="pred">pred</span>: the router's estimate now for a typical request (mean / p95)
· trends: observed p95 solid, predicted p95 dashed, over up to the last 5 minutes.</p>
</section>
<div class="pair">
<section>
<h2>SLO classes</h2>
<table>
<thead><tr><th>Class</th><th>Targets</th><th>Missed, by</th><th>Judged</th><th>SLO met</th>
<th>Shed, by reason</th>
<th>Not ok, by outcome</th><th>Queued</th><th>Since start</th></tr></thead>
<tbody>{classes}</tbody>
</table>
</section>
<section>
<h2>Tenants</h2>
<table>
<thead><tr><th>Tenant</th><th>Judged</th><th>SLO met</th><th>Shed, by reason</th>
<th>Not ok, by outcome</th><th>Since start</th><th>Spend</th><th>Per 1k SLO met</th>
<th>Served tokens</th><th>Fair share counter, by class</th></tr></thead>
<tbody>{tenants}</tbody>
</table>
</section>
<section>
<h2>API keys</h2>
<table>
<thead><tr><th>Tenant</th><th>Key</th><th>Name</th><th>State</th><th>Requests</th>
<th>Spend</th><th>Last used (UTC hour)</th></tr></thead>
<tbody>{keys}</tbody>
</table>
</section>
</div>
<p class="legend">Counts are this replica's, over the window shown at the top.</p>
<section>
<h2>Recent routing decisions</h2>
<table class="decisions">
<thead><tr><th>When</th><th>Request</th><th>Tenant</th><th>Class</th><th>Chosen</th>
<th>Why</th></tr></thead>
<tbody id="decisions">{decisions}</tbody>
</table>
</section>
</main>
</body>
</html>
"""

_LOGIN = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>slo-gateway dashboard: sign in</title>
<link rel="stylesheet" href="dashboard/static/dashboard.css">
</head>
<body class="login">
<form method="post" action="dashboard">
<h1>slo-gateway</h1>
<p>{message}</p>
<label>Admin key <input type="password" name="key" autocomplete="current-password" required>
</label>
<button type="submit">Open the dashboard</button>
</form>
</body>
</html>
"""

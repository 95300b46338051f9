"""The run as markdown: figures, ratios against the floor and LiteLLM, targets, load share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.relay.figures import RATIOS, Figures
from benchmarks.relay.systems import FLOOR, LITELLM

ABSOLUTE = (
    ("added p50 @50/s ms", "added_p50_ms_at_50", 2),
    ("added p99 @50/s ms", "added_p99_ms_at_50", 2),
    ("added p50 @200/s ms", "added_p50_ms_at_200", 2),
    ("added p99 @200/s ms", "added_p99_ms_at_200", 2),
    ("added TTFT p50 ms", "added_ttft_p50_ms", 2),
    ("req/s (wall)", "req_per_s", 0),
    ("req/s per core", "req_per_core_s", 0),
    ("tokens/s per core", "tokens_per_core_s", 0),
    ("CPU-s / 1k req", "cpu_s_per_1k_req", 3),
    ("RSS MB", "rss_loaded_mb", 0),
)
RATIO_LABELS = {
    "req_per_core_s": "req/s per core",
    "tokens_per_core_s": "tokens/s per core",
    "added_p50_ms_at_200": "added p50 @200/s",
    "added_ttft_p50_ms": "added TTFT p50",
    "cpu_s_per_1k_req": "CPU / request",
}


def _number(value: float | None, digits: int) -> str:
    if value is None:
        return "n/a"
    if 0 < abs(value) < 10**-digits:
        return f"{value:.1g}"  # a ratio against a saturated system, say
    return f"{value:,.{digits}f}"


def _table(header: Sequence[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def absolute(
    summary: dict[str, Figures], labels: dict[str, str], saturated: dict[str, list[str]]
) -> list[str]:
    rows = []
    for system, figures in summary.items():
        name = labels[system] + (
            f" (saturated: {', '.join(saturated[system])})" if saturated.get(system) else ""
        )
        rows.append([name, *(_number(figures.get(key), d) for _, key, d in ABSOLUTE)])
    return _table(["system", *(label for label, _, _ in ABSOLUTE)], rows)


def ratio_table(table: dict[str, Figures], labels: dict[str, str]) -> list[str]:
    rows = [[labels[s], *(_number(f.get(key), 2) for key, _ in RATIOS)] for s, f in table.items()]
    return _table(["system", *(RATIO_LABELS[key] for key, _ in RATIOS)], rows)


def target_table(rows: list[dict[str, Any]]) -> list[str]:
    verdict = {True: "met", False: "MISSED", None: "not measured"}
    body = [[r["target"], _number(r["ratio"], 2), verdict[r["met"]]] for r in rows]
    return _table(["target (gateway, memory store unless said)", "ratio", "result"], body)


def load_table(summary: dict[str, Figures], labels: dict[str, str]) -> list[str]:
    rows = [
        [
            labels[s],
            _number(f.get("loadgen_share_max"), 2),
            _number(f.get("load_core_share_max"), 2),
            _number(f.get("proxy_core_share"), 2),
        ]
        for s, f in summary.items()
    ]
    header = [
        "system",
        "load generator CPU share (max)",
        "load core busy (max)",
        "proxy core share at 64 in flight",
    ]
    return _table(header, rows)


def micro_table(micro: dict[str, Any]) -> list[str]:
    rows = [
        [
            case,
            _number(r.get("json_us"), 1),
            _number(r.get("orjson_us"), 1),
            _number(r.get("speedup"), 1),
        ]
        for case, r in micro.items()
    ]
    return _table(["JSON work per request", "json µs", "orjson µs", "speedup"], rows)


def render(result: dict[str, Any]) -> str:
    meta, labels = result["meta"], result["labels"]
    lines = [
        f"# Relay overhead, {meta['date']}",
        "",
        f"Machine: {meta['machine']}. Command: `{meta['command']}`.",
        f"Settings: {meta['settings']}.",
        "",
        "## Figures (medians over repeats; added = minus direct in the same repeat)",
        "",
    ]
    lines += absolute(result["summary"], labels, result["saturated"])
    for reference, title in ((FLOOR, "the floor (FastAPI + aiohttp)"), (LITELLM, "LiteLLM")):
        if result["ratios"].get(reference):
            lines += [
                "",
                f"## Ratios against {title}",
                "",
                "Throughput: higher is better. Latency and CPU: lower is better.",
                "",
            ]
            lines += ratio_table(result["ratios"][reference], labels)
    lines += ["", "## Targets (issue 9)", "", *target_table(result["targets"])]
    lines += ["", "## Load generator and load core", "", *load_table(result["summary"], labels)]
    if result.get("micro"):
        lines += ["", "## Body rewrite: json vs orjson (in process, one core)", ""]
        lines += micro_table(result["micro"])
    lines += ["", *result.get("notes", [])]
    return "\n".join(lines) + "\n"

"""The report as files: markdown for people, JSON for machines, one comparison across policies.

    report.md / report.json      one run (`write_report`)
    comparison.md / .json        one row per policy and class (`write_comparison`)
Charts (PNG) come from `gateway.offline.report_charts` when matplotlib is installed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from gateway.offline.endpoint_split import Coverage, sum_coverage
from gateway.offline.report import ALL, GroupStats, Summary

_GROUP_HEADER = (
    "| group | n | ok | shed | err | TTFT p50/p95/p99 ms | TPOT p50/p95/p99 ms | attainment "
    "| goodput req/s | cost $ | cached |"
)
_COMPARE_HEADER = (
    "| policy | class | n | attainment | goodput req/s | shed | err | TTFT p95 ms | TTFT p99 ms "
    "| TPOT p95 ms | cost $ | cached | TTFT cov | TPOT cov | checks |"
)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.0f}"


def _pct(value: float) -> str:
    return f"{value * 100:.1f}%"


def _group_row(name: str, g: GroupStats) -> str:
    ttft = "/".join(_ms(v) for v in (g.ttft_p50_s, g.ttft_p95_s, g.ttft_p99_s))
    tpot = "/".join(_ms(v) for v in (g.tpot_p50_s, g.tpot_p95_s, g.tpot_p99_s))
    return (
        f"| {name} | {g.count} | {_pct(g.success_rate)} | {_pct(g.shed_rate)} | "
        f"{_pct(g.error_rate)} | {ttft} | {tpot} | {_pct(g.attainment)} | "
        f"{g.goodput_rps:.2f} | {g.cost:.4f} | {_pct(g.cached_share)} |"
    )


def markdown(summary: Summary) -> str:
    verdict = "PASS" if summary.passed else "FAIL"
    lines = [
        f"# {summary.scenario}: {verdict}",
        "",
        f"policy `{summary.policy}`, {summary.driver} run, {summary.duration_s:g} s of arrivals",
        "",
        _GROUP_HEADER,
        "|" + "---|" * 11,
    ]
    lines += [_group_row(name, stats) for name, stats in _ordered(summary.groups)]
    lines += ["", "## Pass criteria", ""]
    lines += [
        f"- {'PASS' if ok else 'FAIL'} `{text}` (observed {_value(observed)})"
        for text, observed, ok in summary.checks
    ] or ["- none"]
    lines += ["", *split_lines([summary]), "", *coverage_lines(summary)]
    lines += ["", "## Run", ""]
    lines += [f"- {name}: {_value(value)}" for name, value in summary.run.items()]
    lines += ["", "## Why requests were not served", ""]
    reasons = summary.groups[ALL].reasons if ALL in summary.groups else {}
    lines += [f"- {reason or '(none)'}: {count}" for reason, count in sorted(reasons.items())]
    return "\n".join(lines + _over_time(summary)) + "\n"


def _over_time(summary: Summary) -> list[str]:
    """Per window: offered and served requests; of those offered, met (goodput), refused and
    late; attainment per class, cost."""
    classes = sorted({name for w in summary.timeline for name in w.attainment})
    counts = "| from s | offered | served | met | refused | late | "
    header = counts + " | ".join(classes) + " | cost $ |"
    lines = ["", "## Over time", "", header, "|" + "---|" * (len(classes) + 7)]
    for w in summary.timeline:
        shares = [_attained(w.attainment.get(name)) for name in classes]
        row = [f"{w.start_s:g}", str(w.arrivals), str(w.served), str(w.met), str(w.refused)]
        row += [str(w.late), *shares, f"{w.cost:.4f}"]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _attained(value: float | None) -> str:
    return "-" if value is None else _pct(value)


def _ordered(groups: dict[str, GroupStats]) -> list[tuple[str, GroupStats]]:
    """all first, then classes, tenants, and class x tenant."""

    def rank(name: str) -> tuple[int, str]:
        if name == ALL:
            return 0, name
        return (3 if "/" in name else 1 if name.startswith("class:") else 2), name

    return sorted(groups.items(), key=lambda item: rank(item[0]))


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def write_report(summary: Summary, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md, js = out_dir / "report.md", out_dir / "report.json"
    md.write_text(markdown(summary))
    js.write_text(json.dumps(summary.to_json(), indent=2))
    return [md, js]


def comparison_rows(summaries: Sequence[Summary]) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for summary in summaries:
        passed = sum(ok for _, _, ok in summary.checks)
        classes = [n for n in summary.groups if n.startswith("class:") and "/" not in n]
        shown = classes if len(classes) == 1 else [ALL, *classes]
        for name, g in _ordered(summary.groups):
            if name not in shown:
                continue
            rows.append(
                {
                    "policy": summary.policy,
                    "class": name.removeprefix("class:"),
                    "count": g.count,
                    "attainment": g.attainment,
                    "goodput_rps": g.goodput_rps,
                    "shed_rate": g.shed_rate,
                    "error_rate": g.error_rate,
                    "ttft_p95_s": g.ttft_p95_s,
                    "ttft_p99_s": g.ttft_p99_s,
                    "tpot_p95_s": g.tpot_p95_s,
                    "cost": g.cost,
                    "cached_share": g.cached_share,
                    "ttft_coverage": _coverage_of(summary, name).ttft,
                    "tpot_coverage": _coverage_of(summary, name).tpot,
                    "checks": f"{passed}/{len(summary.checks)}",
                    "passed": summary.passed,
                }
            )
    return rows


def comparison_markdown(summaries: Sequence[Summary]) -> str:
    first = summaries[0]
    lines = [
        f"# {first.scenario}: policies compared ({first.driver})",
        "",
        _COMPARE_HEADER,
        "|" + "---|" * 15,
    ]
    for row in comparison_rows(summaries):
        lines.append(
            f"| {row['policy']} | {row['class']} | {row['count']} | {_pct(_f(row['attainment']))} "
            f"| {_f(row['goodput_rps']):.2f} | {_pct(_f(row['shed_rate']))} "
            f"| {_pct(_f(row['error_rate']))} | {_ms(_opt(row['ttft_p95_s']))} "
            f"| {_ms(_opt(row['ttft_p99_s']))} | {_ms(_opt(row['tpot_p95_s']))} "
            f"| {_f(row['cost']):.4f} | {_pct(_f(row['cached_share']))} "
            f"| {_share(_opt(row['ttft_coverage']))} "
            f"| {_share(_opt(row['tpot_coverage']))} | {row['checks']} |"
        )
    bound = first.run.get("cache_bound")
    if bound is not None:
        lines += ["", f"The trace's block reuse allows a cached share of {_pct(bound)} at most."]
    return "\n".join([*lines, "", *split_lines(summaries)]) + "\n"


def split_lines(summaries: Sequence[Summary]) -> list[str]:
    """Requests served and spend per endpoint, one row per policy and endpoint."""
    lines = [
        "## Per endpoint",
        "",
        "| policy | endpoint | served | share | cost $ | share of cost |",
        "|---|---|---|---|---|---|",
    ]
    for summary in summaries:
        served = sum(share.requests for share in summary.split.values())
        spent = sum(share.cost for share in summary.split.values())
        lines += [
            f"| {summary.policy} | {endpoint} | {share.requests} | "
            f"{_share(share.requests / served if served else None)} | {share.cost:.4f} | "
            f"{_share(share.cost / spent if spent else None)} |"
            for endpoint, share in summary.split.items()
        ]
    return lines


def coverage_lines(summary: Summary) -> list[str]:
    """The predicted p95s' coverage per class and per endpoint and class."""
    lines = [
        "## Coverage of the predicted p95",
        "",
        "| group | TTFT n | TTFT within p95 | TPOT n | TPOT within p95 |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {name} | {c.ttft_n} | {_share(c.ttft)} | {c.tpot_n} | {_share(c.tpot)} |"
        for name, c in summary.coverage.items()
    ]
    return lines if summary.coverage else [*lines[:2], "- no predictions (the policy makes none)"]


def _coverage_of(summary: Summary, group: str) -> Coverage:
    if group == ALL:
        return sum_coverage(c for name, c in summary.coverage.items() if "/" not in name)
    return summary.coverage.get(group, Coverage())


def _share(value: float | None) -> str:
    return "-" if value is None else _pct(value)


def _f(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _opt(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def write_comparison(summaries: Sequence[Summary], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    md, js = out_dir / "comparison.md", out_dir / "comparison.json"
    md.write_text(comparison_markdown(summaries))
    js.write_text(json.dumps(comparison_rows(summaries), indent=2))
    return [md, js]

"""Runs and their files, shared by `slo-gateway simulate` and `slo-gateway loadtest`.

Output layout under the chosen directory:
    <policy>/records.jsonl   one LoadRecord per request
    <policy>/report.md|json  the report (gateway.offline.render)
    <policy>/report.png      its chart (when matplotlib is installed)
    comparison.md|json|png   with more than one policy
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway.offline import render
from gateway.offline import report_charts as charts
from gateway.offline.records import LoadRecord, write_records
from gateway.offline.report import RunFacts, Summary, summarize
from gateway.offline.scenario import Scenario, TenantSpec
from gateway.offline.simulator import SimResult, Simulator
from gateway.offline.trace import PlannedRequest
from policies.registry import POLICIES


@dataclass(frozen=True, slots=True)
class Run:
    summary: Summary
    records: Sequence[LoadRecord]


def policy_names(text: str) -> list[str]:
    """ "a,b,c" -> names, each a registered policy (ValueError naming the unknown ones)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise ValueError(f"unknown policies {unknown}; choose from {', '.join(POLICIES)}")
    return names


def for_trace(scenario: Scenario, plan: Sequence[PlannedRequest]) -> Scenario:
    """`scenario`'s fleet and classes for a trace: its tenants added, its span as duration."""
    unknown = sorted({r.slo_class for r in plan} - set(scenario.classes))
    if unknown:
        raise ValueError(
            f"trace classes {unknown} are not in scenario {scenario.name!r} "
            f"(classes: {', '.join(scenario.classes)})"
        )
    tenants = dict(scenario.tenants)
    for name in sorted({r.tenant for r in plan} - set(tenants)):
        tenants[name] = TenantSpec(allowed_classes=list(scenario.classes))
    last_s = max((r.arrival_s for r in plan), default=0.0)
    update: dict[str, Any] = {"tenants": tenants, "duration_s": last_s + 1.0, "faults": []}
    return scenario.model_copy(update=update)


def simulate(
    scenario: Scenario, plan: Sequence[PlannedRequest], policy: str, seed: int = 0
) -> tuple[Run, SimResult]:
    """One offline run, and the simulator's own result (its speed)."""
    result = Simulator(scenario, plan, {"name": policy}, seed=seed).run()
    facts = RunFacts(policy=policy, driver="offline", preemptions=float(result.preemptions))
    return Run(summarize(scenario, result.records, facts), result.records), result


def publish(runs: Sequence[Run], out_dir: Path, *, chart: bool = True) -> list[Path]:
    """Write every run's files and, for several, the comparison; returns the paths written."""
    drawn = chart and charts.available()
    written: list[Path] = []
    for run in runs:
        folder = out_dir / run.summary.policy
        folder.mkdir(parents=True, exist_ok=True)
        write_records(folder / "records.jsonl", run.records)
        written += [folder / "records.jsonl", *render.write_report(run.summary, folder)]
        if drawn:
            written.append(charts.report_chart(run.summary, folder / "report.png"))
    if len(runs) > 1:
        summaries = [r.summary for r in runs]
        written += render.write_comparison(summaries, out_dir)
        if drawn:
            written.append(charts.comparison_chart(summaries, out_dir / "comparison.png"))
    return written

"""Runs and their files, shared by `slo-gateway simulate` and `slo-gateway loadtest`.

Output layout under the chosen directory:
    <policy>/records.jsonl   one LoadRecord per request
    <policy>/report.md|json  the report (gateway.offline.render)
    <policy>/report.png      its chart (when matplotlib is installed)
    comparison.md|json|png   with more than one policy
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from gateway.config.settings import format_validation_error
from gateway.offline import render
from gateway.offline import report_charts as charts
from gateway.offline.records import LoadRecord, write_records
from gateway.offline.report import RunFacts, Summary, summarize
from gateway.offline.scenario import Scenario, ScenarioTenant
from gateway.offline.simulator import SimResult, Simulator
from gateway.offline.trace import PlannedRequest
from policies.registry import POLICIES, PolicyParams


@dataclass(frozen=True, slots=True)
class Run:
    summary: Summary
    records: Sequence[LoadRecord]


@dataclass(frozen=True, slots=True)
class PolicyChoice:
    """A policy to run: its label (the run's folder and report row) and its config, the
    `policy` section of a gateway config."""

    label: str
    config: Mapping[str, Any]

    @classmethod
    def named(cls, name: str) -> PolicyChoice:
        """A registered policy with its default parameters."""
        return cls(name, {"name": name})


LONG_TRACE_S = 300.0  # a trace this long reports its timeline per minute
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_PARAMS: TypeAdapter[Any] = TypeAdapter(PolicyParams)


def defined_policies(document: Any, source: str) -> dict[str, Mapping[str, Any]]:
    """A policy file's contents (label -> policy section), each section validated as the
    gateway's config would (ValueError saying which label and what is wrong)."""
    if not isinstance(document, Mapping) or not document:
        raise ValueError(f"{source}: expected a mapping of labels to policy sections")
    defined: dict[str, Mapping[str, Any]] = {}
    for label, section in document.items():
        if not isinstance(label, str) or not _LABEL.fullmatch(label):
            raise ValueError(f"{source}: label {label!r}: use letters, digits, '_', '.', '-'")
        if label in POLICIES:
            raise ValueError(f"{source}: label {label!r} is a policy's own name; choose another")
        try:
            _PARAMS.validate_python(section)
        except ValidationError as exc:
            raise ValueError(format_validation_error(exc, f"{source}: policy {label!r}")) from None
        defined[label] = section
    return defined


def policy_choices(
    text: str, defined: Mapping[str, Mapping[str, Any]] | None = None
) -> list[PolicyChoice]:
    """ "a,b,c" -> each a label of `defined` (a policy file's) or a registered policy's name
    (ValueError naming the unknown ones)."""
    defined = defined or {}
    labels = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in labels if n not in POLICIES and n not in defined]
    if unknown or not labels:
        choices = ", ".join([*POLICIES, *defined])
        raise ValueError(f"unknown policies {unknown}; choose from {choices}")
    return [PolicyChoice(n, defined[n]) if n in defined else PolicyChoice.named(n) for n in labels]


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
        tenants[name] = ScenarioTenant(allowed_classes=list(scenario.classes))
    last_s = max((r.arrival_s for r in plan), default=0.0)
    update: dict[str, Any] = {"tenants": tenants, "duration_s": last_s + 1.0, "faults": []}
    if last_s >= LONG_TRACE_S:
        update["window_s"] = 60.0  # the report's timeline per minute
    return scenario.model_copy(update=update)


def simulate(
    scenario: Scenario,
    plan: Sequence[PlannedRequest],
    policy: str | PolicyChoice,
    seed: int = 0,
) -> tuple[Run, SimResult]:
    """One offline run, and the simulator's own result (its speed). `policy`: a registered
    policy's name (its defaults), or a labelled config."""
    choice = policy if isinstance(policy, PolicyChoice) else PolicyChoice.named(policy)
    result = Simulator(scenario, plan, choice.config, seed=seed).run()
    facts = RunFacts(policy=choice.label, driver="offline", preemptions=float(result.preemptions))
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

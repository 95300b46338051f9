"""`slo-gateway simulate`; `register(app)` adds it to the Typer app. The live twin,
`slo-gateway loadtest`, is loadtests/command.py, built on the options and helpers here.

Both write the same report (gateway/offline/runs.py) and exit 1 when a run misses its
scenario's pass criteria (2 on a usage error).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer
import yaml
from pydantic import ValidationError

from gateway.offline import render
from gateway.offline import report_charts as charts
from gateway.offline.runs import (
    PolicyChoice,
    Run,
    defined_policies,
    policy_choices,
    publish,
    simulate,
)
from gateway.offline.scenario import Scenario
from gateway.offline.scenarios import SCENARIOS
from gateway.offline.trace import PlannedRequest
from gateway.offline.trace_options import (
    BandsOpt,
    ClassOpt,
    ColumnOpt,
    DurationOpt,
    MaxPromptOpt,
    RequestsOpt,
    SpeedupOpt,
    StartOpt,
    TenantOpt,
    TokenScaleOpt,
    TraceChoice,
    TraceOpt,
    replayed,
)
from gateway.telemetry.metrics import log

PLOT_EXTRA = "slo-gateway[plot]"
# The gateway's own policy: on the default scenario it holds the pass criteria, where
# least_loaded (85.7% attainment offline) misses them.
DEFAULT_POLICY = "slo_aware"


def register(app: typer.Typer) -> None:
    """Add `simulate` (help from its docstring); `loadtest` is loadtests/command.py's."""
    app.command("simulate")(simulate_command)


ScenarioArg = Annotated[
    str, typer.Argument(help=f"One of: {', '.join(SCENARIOS)}; or a scenario YAML/JSON file.")
]
PolicyOpt = Annotated[
    str,
    typer.Option("--policy", help="A policy, or several: a,b,c (names or --policy-file labels)."),
]
PolicyFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--policy-file",
        help="YAML/JSON: label -> a policy section as in the gateway config; "
        "name its labels in --policy.",
    ),
]
OutOpt = Annotated[Path | None, typer.Option("--out", help="Output directory.")]
SeedOpt = Annotated[int | None, typer.Option(help="Workload seed (default: the scenario's).")]
ChartOpt = Annotated[bool, typer.Option("--chart/--no-chart", help="Draw PNG charts.")]


def scenario_of(name: str) -> Scenario:
    """A catalogue name, or a YAML/JSON file holding a Scenario."""
    if name in SCENARIOS:
        return SCENARIOS[name]()
    path = Path(name)
    if path.suffix not in (".yaml", ".yml", ".json") or not path.is_file():
        raise typer.BadParameter(f"unknown scenario; choose from {', '.join(SCENARIOS)} or a file")
    try:
        spec = Scenario.model_validate(yaml.safe_load(path.read_text()))
    except (yaml.YAMLError, ValidationError) as exc:
        raise typer.BadParameter(f"{path}: {exc}") from None
    if spec.trace is None or spec.trace.path.is_absolute():
        return spec
    # a trace named in a scenario file lies beside it, wherever the command runs
    trace = spec.trace.model_copy(update={"path": path.parent / spec.trace.path})
    return spec.model_copy(update={"trace": trace})


def policies_of(text: str, policy_file: Path | None) -> list[PolicyChoice]:
    defined = {}
    if policy_file is not None:
        try:
            document = yaml.safe_load(policy_file.read_text())
            defined = defined_policies(document, str(policy_file))
        except (OSError, yaml.YAMLError, ValueError) as exc:
            raise typer.BadParameter(str(exc), param_hint="--policy-file") from None
    try:
        return policy_choices(text, defined)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--policy") from None


def finish(runs: list[Run], out: Path, chart: bool) -> None:
    publish(runs, out, chart=chart)
    if chart and not charts.available():
        typer.echo(f"charts skipped (matplotlib missing): pip install '{PLOT_EXTRA}'")
    summaries = [r.summary for r in runs]
    if len(runs) > 1:
        typer.echo(render.comparison_markdown(summaries))
    else:
        typer.echo(render.markdown(summaries[0]))
    typer.echo(f"reports in {out}")
    if not all(s.passed for s in summaries):
        raise typer.Exit(1)


def simulate_command(
    scenario: ScenarioArg = "chat",
    policy: PolicyOpt = DEFAULT_POLICY,
    policy_file: PolicyFileOpt = None,
    trace: TraceOpt = None,
    tenant: TenantOpt = "default",
    slo_class: ClassOpt = "interactive",
    requests: RequestsOpt = None,
    start_s: StartOpt = 0.0,
    duration_s: DurationOpt = None,
    speedup: SpeedupOpt = 1.0,
    token_scale: TokenScaleOpt = 1.0,
    max_prompt_tokens: MaxPromptOpt = None,
    class_column: ColumnOpt = None,
    tenant_column: ColumnOpt = None,
    class_by_prompt: BandsOpt = None,
    out: OutOpt = None,
    seed: SeedOpt = None,
    chart: ChartOpt = True,
) -> None:
    """Replay a scenario or a trace through the gateway's routing and admission, offline."""
    traced = TraceChoice(
        trace,
        tenant,
        slo_class,
        requests,
        start_s,
        duration_s,
        speedup,
        token_scale,
        max_prompt_tokens,
        class_column,
        tenant_column,
        class_by_prompt,
    )
    spec, plan = replayed(scenario_of(scenario), traced, seed)
    runs = _simulate_each(spec, plan, policies_of(policy, policy_file), seed or 0)
    finish(runs, out or Path("results") / f"simulate-{spec.name}", chart)


def _simulate_each(
    spec: Scenario, plan: list[PlannedRequest], policies: list[PolicyChoice], seed: int
) -> list[Run]:
    # The gateway code run offline logs as it does live (breaker phase changes); stamped with
    # wall time while it runs in virtual time, those lines would only clutter the report.
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        return [_simulate_one(spec, plan, choice, seed) for choice in policies]
    finally:
        log.setLevel(level)


def _simulate_one(
    spec: Scenario, plan: list[PlannedRequest], choice: PolicyChoice, seed: int
) -> Run:
    run, result = simulate(spec, plan, choice, seed)
    per_cpu_s = len(plan) / max(result.cpu_s, 1e-9)
    typer.echo(
        f"{choice.label}: simulated {len(plan)} requests in {result.wall_s:.2f} s wall, "
        f"{result.cpu_s:.2f} s CPU ({per_cpu_s:.0f} requests per CPU second)"
    )
    return run

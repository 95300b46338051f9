"""`slo-gateway loadtest`: a scenario or a trace run live, Locust against the gateway (with the
simulated fleet on loopback), reported as `slo-gateway simulate` reports; `register(app)` adds
it to the Typer app. Exit 1 when a run misses its scenario's pass criteria, 2 on a usage error.
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from typing import Annotated, Literal

import typer

from gateway.offline.simulate_command import (
    DEFAULT_POLICY,
    ChartOpt,
    OutOpt,
    PolicyFileOpt,
    PolicyOpt,
    ScenarioArg,
    SeedOpt,
    finish,
    policies_of,
    scenario_of,
)
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
from loadtests.live import LiveOptions, run_live

LOAD_EXTRA = "slo-gateway[load]"


def register(app: typer.Typer) -> None:
    """Add `loadtest` (help from its docstring)."""
    app.command("loadtest")(loadtest_command)


def loadtest_command(
    scenario: ScenarioArg,
    policy: PolicyOpt = DEFAULT_POLICY,
    policy_file: PolicyFileOpt = None,
    url: Annotated[
        str | None,
        typer.Option(help="Target this gateway instead of starting the simulated fleet."),
    ] = None,
    api_key: Annotated[
        list[str] | None,
        typer.Option("--api-key", help="TENANT=KEY for an external gateway (repeatable)."),
    ] = None,
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
    api: Annotated[
        str, typer.Option("--api", help="The API the users speak: chat, responses or messages.")
    ] = "chat",
) -> None:
    """Run a scenario live: Locust against the gateway (with the simulated fleet on loopback)."""
    if importlib.util.find_spec("locust") is None:
        # Locust runs in a subprocess: without this check every request would fail there
        typer.echo(f"the load test needs Locust: pip install '{LOAD_EXTRA}'", err=True)
        raise typer.Exit(2)
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
    spec, _ = replayed(scenario_of(scenario), traced, seed)
    if requests is not None and spec.trace is None:
        raise typer.BadParameter("live, only a trace is cut to N requests", param_hint="--requests")
    choices = policies_of(policy, policy_file)
    if url is not None and (len(choices) > 1 or policy_file is not None):
        raise typer.BadParameter("an external gateway runs its own policy", param_hint="--policy")
    keys = _keys(api_key or [])
    folder = out or Path("results") / f"loadtest-{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    runs = []
    for choice in choices:
        options = LiveOptions(
            policy=choice.label, config=choice.config, url=url, keys=keys, seed=seed, api=_api(api)
        )
        typer.echo(f"{choice.label}: running {spec.name} live for about {spec.duration_s:g} s")
        runs.append(run_live(spec, folder / choice.label, options))
    finish(runs, folder, chart)


LiveApi = Literal["chat", "responses", "messages"]
_LIVE_APIS: dict[str, LiveApi] = {"chat": "chat", "responses": "responses", "messages": "messages"}


def _api(text: str) -> LiveApi:
    if text not in _LIVE_APIS:
        raise typer.BadParameter("expected chat, responses or messages", param_hint="--api")
    return _LIVE_APIS[text]


def _keys(items: list[str]) -> dict[str, str]:
    keys = {}
    for item in items:
        tenant, sep, key = item.partition("=")
        if not sep or not tenant or not key:
            raise typer.BadParameter(f"expected TENANT=KEY, got {item!r}", param_hint="--api-key")
        keys[tenant] = key
    return keys

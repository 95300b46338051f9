"""`slo-gateway bench` and `slo-gateway kv-capacity`; `register(app)` adds both to the Typer app."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from gateway.bench import sweep_charts as charts
from gateway.bench.api_events import APIS, Api, api_headers
from gateway.bench.capacity_command import kv_capacity
from gateway.bench.sweep import LevelRun, Progress, SweepPlan, flatten, run_sweep
from gateway.bench.sweep_client import Target, endpoint_url, make_client
from gateway.bench.sweep_report import (
    Slo,
    render_errors,
    render_notes,
    render_table,
    summarize_level,
    write_csv,
    write_json,
)


def register(app: typer.Typer) -> None:
    """Add `bench` and `kv-capacity` to the gateway's Typer app (help from the docstrings)."""
    app.command("bench")(bench)
    app.command("kv-capacity")(kv_capacity)


def _int_list(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        message = f"expected comma-separated positive integers, got {text!r}"
        raise typer.BadParameter(message, param_hint=option)
    return values


def _api(text: str) -> Api:
    for api in APIS:
        if text == api:
            return api
    raise typer.BadParameter(f"expected one of {', '.join(APIS)}", param_hint="--api")


def _slo(text: str | None) -> Slo | None:
    try:
        return None if text is None else Slo.parse(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--slo") from None


def _headers(api_key_env: str | None, extra: list[str]) -> dict[str, str]:
    headers = {}
    for item in extra:
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            raise typer.BadParameter(f"expected 'Name: value', got {item!r}", param_hint="--header")
        headers[name.strip()] = value.strip()
    if api_key_env is not None:
        key = os.environ.get(api_key_env)
        if not key:
            raise typer.BadParameter(f"${api_key_env} is not set", param_hint="--api-key-env")
        headers["Authorization"] = f"Bearer {key}"
    return headers


async def _run(target: Target, plan: SweepPlan, timeout_s: float) -> list[LevelRun]:
    async with make_client(timeout_s=timeout_s, max_connections=max(plan.concurrency)) as client:
        return await run_sweep(client, target, plan, Progress(plan))


def publish_sweep(runs: list[LevelRun], slo: Slo | None, meta: dict[str, Any], out: Path) -> None:
    """Print the table and notes; write the CSV, the JSON and (with matplotlib) the charts."""
    summaries = [summarize_level(run) for run in runs]
    typer.echo(render_table(summaries, slo))
    for line in render_notes(summaries, slo) + render_errors(flatten(runs)):
        typer.echo(line)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(flatten(runs), out / "requests.csv")
    write_json(runs, slo, meta, out / "results.json")
    typer.echo(f"wrote {out / 'requests.csv'} and {out / 'results.json'}")
    try:
        charts.draw_latency_chart(summaries, out / "latency_vs_concurrency.png", slo)
        charts.draw_throughput_chart(summaries, out / "throughput_vs_latency.png", slo)
    except ModuleNotFoundError as exc:
        typer.echo(f"charts skipped ({exc.name} missing): pip install 'slo-gateway[plot]'")
        return
    typer.echo(f"charts: {out / 'latency_vs_concurrency.png'}, {out / 'throughput_vs_latency.png'}")


BaseUrl = Annotated[
    str, typer.Option(help="OpenAI base URL as the SDK takes it, e.g. http://host:8000/v1.")
]
Model = Annotated[str, typer.Option(help="Model name to send.")]
ApiKeyEnv = Annotated[
    str | None, typer.Option(help="Env var holding the API key (sent as Bearer).")
]
Out = Annotated[
    Path, typer.Option(help="Directory for requests.csv, results.json and the PNG charts.")
]
Concurrency = Annotated[str, typer.Option(help="Comma-separated concurrency levels.")]
PromptTokens = Annotated[
    str, typer.Option(help="Comma-separated prompt lengths (tokens, ~4 chars each).")
]
Requests = Annotated[
    int, typer.Option(min=1, help="Requests per level (ignored with --duration-s).")
]
DurationS = Annotated[float | None, typer.Option(min=0.1, help="Run each level this long instead.")]
OutputTokens = Annotated[int, typer.Option(min=1, help="max_tokens per request.")]
ApiOpt = Annotated[
    str, typer.Option("--api", help="chat (/chat/completions), completions, responses or messages.")
]
SloOpt = Annotated[str | None, typer.Option(help="p95 targets, e.g. ttft=500ms,tpot=50ms.")]
IgnoreEos = Annotated[
    bool, typer.Option(help="Send vLLM's ignore_eos so every answer has max_tokens.")
]
Header = Annotated[
    list[str] | None, typer.Option(help="Extra request header 'Name: value' (repeatable).")
]
TimeoutS = Annotated[float, typer.Option(min=1, help="Per-request read timeout in seconds.")]
Warmup = Annotated[
    int, typer.Option(min=0, help="Unrecorded requests sent first (opens connections).")
]


def bench(
    base_url: BaseUrl,
    model: Model,
    api_key_env: ApiKeyEnv = None,
    out: Out = Path("bench-results"),
    concurrency: Concurrency = "1,4,16",
    prompt_tokens: PromptTokens = "128,2000",
    requests: Requests = 32,
    duration_s: DurationS = None,
    output_tokens: OutputTokens = 128,
    api: ApiOpt = "chat",
    slo: SloOpt = None,
    ignore_eos: IgnoreEos = False,
    header: Header = None,
    timeout_s: TimeoutS = 300.0,
    warmup: Warmup = 1,
) -> None:
    """Sweep concurrency x prompt length; print p50/p95/p99 per level; write CSV, JSON, charts."""
    kind = _api(api)
    headers = api_headers(kind) | _headers(api_key_env, header or [])
    target = Target(endpoint_url(base_url, kind), model, kind, headers, ignore_eos)
    levels = (_int_list(prompt_tokens, "--prompt-tokens"), _int_list(concurrency, "--concurrency"))
    plan = SweepPlan(*levels, requests, duration_s, output_tokens, warmup)
    slo_target = _slo(slo)
    runs = asyncio.run(_run(target, plan, timeout_s))
    meta = {"url": target.url, "model": model, "api": kind, "plan": dataclasses.asdict(plan)}
    meta["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    publish_sweep(runs, slo_target, meta, out)
    if all(not r.measurement.ok for r in flatten(runs)):
        typer.echo("every request failed; see the error column of requests.csv", err=True)
        raise typer.Exit(1)

"""The trace options `simulate` and `loadtest` share, and the scenario a trace replays on.

`--trace FILE` with its options becomes the scenario's `trace:` section (gateway/offline/
trace_replay.py), replacing any the scenario file has; a scenario with a trace section is
fitted the same way: its tenants gain the trace's, its duration becomes the window's span, its
faults are dropped (they were timed for the scenario's own traffic).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from gateway.offline.runs import for_trace
from gateway.offline.scenario import Scenario
from gateway.offline.trace import PlannedRequest, TraceError
from gateway.offline.trace_replay import PromptBand, TraceSpec

TraceOpt = Annotated[
    Path | None,
    typer.Option(help="Replay this trace (JSONL/CSV: ours, Mooncake, Azure, BurstGPT)."),
]
TenantOpt = Annotated[str, typer.Option(help="Tenant of trace rows without one.")]
ClassOpt = Annotated[str, typer.Option("--slo-class", help="Class of trace rows without one.")]
RequestsOpt = Annotated[int | None, typer.Option(help="Replay only the first N requests.")]
StartOpt = Annotated[float, typer.Option(help="Trace window start, s from its first arrival.")]
DurationOpt = Annotated[float | None, typer.Option(help="Trace window length, s (default: all).")]
SpeedupOpt = Annotated[float, typer.Option(help="Replay the trace's arrivals this much faster.")]
TokenScaleOpt = Annotated[float, typer.Option(help="Multiply the trace's token counts by this.")]
MaxPromptOpt = Annotated[int | None, typer.Option(help="Cut trace prompts to this many tokens.")]
ColumnOpt = Annotated[str | None, typer.Option(help="Take it from this trace column.")]
BandsOpt = Annotated[
    str | None,
    typer.Option(
        "--class-by-prompt",
        help="Class by prompt length: TOKENS=CLASS,... (e.g. 2000=chat,8000=rag): the first "
        "band whose TOKENS holds the prompt; longer prompts keep their own class.",
    ),
]


@dataclass(frozen=True, slots=True)
class TraceChoice:
    """What the command line says of a trace (None path: the scenario's own, if any)."""

    path: Path | None
    tenant: str = "default"
    slo_class: str = "interactive"
    requests: int | None = None
    start_s: float = 0.0
    duration_s: float | None = None
    speedup: float = 1.0
    token_scale: float = 1.0
    max_prompt_tokens: int | None = None
    class_column: str | None = None
    tenant_column: str | None = None
    class_by_prompt: str | None = None

    def spec(self) -> TraceSpec | None:
        if self.path is None:
            return None
        bands = prompt_bands(self.class_by_prompt) if self.class_by_prompt else []
        try:
            return TraceSpec(
                path=self.path,
                default_tenant=self.tenant,
                default_class=self.slo_class,
                requests=self.requests,
                start_s=self.start_s,
                duration_s=self.duration_s,
                speedup=self.speedup,
                token_scale=self.token_scale,
                max_prompt_tokens=self.max_prompt_tokens,
                class_column=self.class_column,
                tenant_column=self.tenant_column,
                class_by_prompt=bands,
            )
        except ValidationError as exc:
            raise typer.BadParameter(str(exc), param_hint="--trace") from None


def prompt_bands(text: str) -> list[PromptBand]:
    """`--class-by-prompt`'s TOKENS=CLASS pairs as bands, in the order given (the first that
    holds a prompt classes it, so they go shortest first)."""
    bands = []
    for pair in text.split(","):
        tokens, _, slo_class = pair.strip().partition("=")
        if not tokens.strip().isdigit() or int(tokens) < 1 or not slo_class.strip():
            raise typer.BadParameter(
                f"{pair.strip()!r} is not TOKENS=CLASS (e.g. 2000=chat)",
                param_hint="--class-by-prompt",
            )
        bands.append(PromptBand(up_to_tokens=int(tokens), slo_class=slo_class.strip()))
    if [b.up_to_tokens for b in bands] != sorted(b.up_to_tokens for b in bands):
        raise typer.BadParameter(
            "give the bands shortest first (the first that holds a prompt classes it)",
            param_hint="--class-by-prompt",
        )
    return bands


def replayed(
    spec: Scenario, choice: TraceChoice, seed: int | None
) -> tuple[Scenario, list[PlannedRequest]]:
    """The scenario to run and its plan: its own, or the trace's on its fleet and classes."""
    trace = choice.spec() or spec.trace
    if trace is None:
        if not spec.traffic:
            raise typer.BadParameter(f"scenario {spec.name!r} has no traffic: give it a trace")
        return spec, spec.plan(seed)[: choice.requests]
    spec = spec.model_copy(update={"trace": trace})
    try:
        plan = spec.plan(seed)
        fitted = for_trace(spec, plan)
    except (OSError, TraceError, ValueError) as exc:
        raise typer.BadParameter(str(exc), param_hint="--trace") from None
    _report_oversized(fitted, plan)
    return fitted, plan


def _report_oversized(spec: Scenario, plan: list[PlannedRequest]) -> None:
    """Requests no endpoint can hold are replayed (and fail) but said first, not hidden."""
    if spec.providers or not spec.engines:
        return  # a hosted provider takes any length
    largest = max(e.params.max_model_len for e in spec.engines)
    over = [r for r in plan if r.prompt_tokens + r.output_tokens > largest]
    if over:
        typer.echo(
            f"{len(over)} of {len(plan)} trace requests exceed every endpoint's context "
            f"({largest} tokens, prompt and output); they will fail: fit them with "
            "--max-prompt-tokens or --token-scale",
            err=True,
        )

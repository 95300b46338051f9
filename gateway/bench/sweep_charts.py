"""The two PNG charts of a sweep. matplotlib is imported only when drawing (extras `plot`/`test`).

latency_vs_concurrency.png   two panels (TTFT, TPOT); x = concurrency; p50 solid and p95 dashed,
                             one colour per prompt length; the SLO as a horizontal line and a red
                             cross on every p95 point above it
throughput_vs_latency.png    two panels (p95 TTFT, p95 TPOT) against aggregate output tokens/s,
                             one line per prompt length, points labelled with their concurrency

The series are computed by pure functions so tests can check them without drawing; the draw
functions return the labels of the lines they actually put on the axes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gateway.bench.sweep_report import LevelSummary, Percentiles, Slo

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

METRICS = ("TTFT", "TPOT")


@dataclass(frozen=True, slots=True)
class ChartSeries:
    panel: str  # "TTFT" or "TPOT"
    label: str
    prompt_tokens: int
    x: tuple[float, ...]
    y_ms: tuple[float, ...]
    concurrency: tuple[int, ...]  # of each point
    dashed: bool = False


def _percentiles(s: LevelSummary, metric: str) -> Percentiles:
    return s.ttft_s if metric == "TTFT" else s.tpot_s


def _by_prompt(summaries: Sequence[LevelSummary]) -> dict[int, list[LevelSummary]]:
    groups: dict[int, list[LevelSummary]] = {}
    for s in sorted(summaries, key=lambda s: (s.prompt_tokens, s.concurrency)):
        groups.setdefault(s.prompt_tokens, []).append(s)
    return groups


Point = tuple[LevelSummary, float, float | None]  # level, x, y in seconds (None: no value)


def _series(panel: str, label: str, points: Sequence[Point], dashed: bool = False) -> ChartSeries:
    """Points with a value, y in ms; a level without one is left out."""
    kept = [(s, x, y) for s, x, y in points if y is not None]
    return ChartSeries(
        panel=panel,
        label=label,
        prompt_tokens=points[0][0].prompt_tokens,
        x=tuple(x for _, x, _ in kept),
        y_ms=tuple(y * 1000 for _, _, y in kept),
        concurrency=tuple(s.concurrency for s, _, _ in kept),
        dashed=dashed,
    )


def latency_series(summaries: Sequence[LevelSummary]) -> list[ChartSeries]:
    """p50 and p95 of TTFT and TPOT against concurrency, per prompt length."""
    series = []
    for metric in METRICS:
        for prompt_tokens, levels in _by_prompt(summaries).items():
            for q in ("p50", "p95"):
                points = [(s, s.concurrency, getattr(_percentiles(s, metric), q)) for s in levels]
                label = f"{metric} {q}, prompt {prompt_tokens}"
                series.append(_series(metric, label, points, dashed=q == "p95"))
    return series


def throughput_series(summaries: Sequence[LevelSummary]) -> list[ChartSeries]:
    """p95 TTFT and TPOT against aggregate output tokens/s, per prompt length."""
    series = []
    for metric in METRICS:
        for prompt_tokens, levels in _by_prompt(summaries).items():
            points = [(s, s.throughput_tokens_per_s, _percentiles(s, metric).p95) for s in levels]
            series.append(_series(metric, f"{metric} p95, prompt {prompt_tokens}", points))
    return series


def _target_ms(slo: Slo | None, metric: str) -> float | None:
    if slo is None:
        return None
    target_s = slo.ttft_s if metric == "TTFT" else slo.tpot_s
    return None if target_s is None else target_s * 1000


def draw_latency_chart(
    summaries: Sequence[LevelSummary], path: Path, slo: Slo | None = None
) -> list[str]:
    fig, axes = _two_panels()
    colours = _colours(summaries)
    drawn = latency_series(summaries)
    for s in drawn:
        style = "--" if s.dashed else "-"
        axes[s.panel].plot(
            s.x, s.y_ms, style, marker="o", color=colours[s.prompt_tokens], label=s.label
        )
        if s.dashed:
            _mark_over_slo(axes[s.panel], s, _target_ms(slo, s.panel))
    concurrency = sorted({s.concurrency for s in summaries})
    for metric, ax in axes.items():
        _finish(ax, drawn, metric, _target_ms(slo, metric), xlabel="concurrent requests")
        ax.set_xscale("log", base=2)
        ax.set_xticks(concurrency, [str(c) for c in concurrency])
    return _save(fig, axes, "Latency vs concurrency (p50 solid, p95 dashed)", path)


def draw_throughput_chart(
    summaries: Sequence[LevelSummary], path: Path, slo: Slo | None = None
) -> list[str]:
    fig, axes = _two_panels()
    colours = _colours(summaries)
    drawn = throughput_series(summaries)
    for s in drawn:
        ax = axes[s.panel]
        ax.plot(s.x, s.y_ms, "-", marker="o", color=colours[s.prompt_tokens], label=s.label)
        for c, x, y in zip(s.concurrency, s.x, s.y_ms, strict=True):
            ax.annotate(f"c={c}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    for metric, ax in axes.items():
        _finish(ax, drawn, metric, _target_ms(slo, metric), xlabel="aggregate output tokens/s")
    return _save(fig, axes, "p95 latency vs throughput (points labelled with concurrency)", path)


def _two_panels() -> tuple[Figure, dict[str, Axes]]:
    """A figure with one panel per metric, side by side."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.5), layout="constrained")
    return fig, dict(zip(METRICS, fig.subplots(1, 2), strict=True))


def _save(fig: Figure, axes: dict[str, Axes], title: str, path: Path) -> list[str]:
    """Title and write the figure; the labels of the lines it holds."""
    fig.suptitle(title)
    fig.savefig(path, dpi=100)
    return [str(line.get_label()) for ax in axes.values() for line in ax.get_lines()]


def _colours(summaries: Sequence[LevelSummary]) -> dict[int, str]:
    palette = ("tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown", "tab:olive")
    prompts = sorted({s.prompt_tokens for s in summaries})
    return {p: palette[i % len(palette)] for i, p in enumerate(prompts)}


def _mark_over_slo(ax: Axes, s: ChartSeries, target_ms: float | None) -> None:
    if target_ms is None:
        return
    over = [(x, y) for x, y in zip(s.x, s.y_ms, strict=True) if y > target_ms]
    if over:
        xs, ys = zip(*over, strict=True)
        ax.plot(xs, ys, "x", color="red", markersize=12, mew=2, label=f"over SLO: {s.label}")


def _finish(
    ax: Axes, series: Sequence[ChartSeries], metric: str, target_ms: float | None, xlabel: str
) -> None:
    if target_ms is not None:
        label = f"{metric} SLO {target_ms:g} ms"
        ax.axhline(target_ms, color="red", linewidth=1, linestyle=":", label=label)
    ax.set_title(metric)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"{metric} (ms)")
    ax.grid(True, alpha=0.3)
    _log_scale_if_wide(ax, [y for s in series if s.panel == metric for y in s.y_ms])
    _legend(ax)


def _log_scale_if_wide(ax: Axes, y_ms: Sequence[float]) -> None:
    """Latency often spans 50 ms to seconds across a sweep; a log axis keeps both readable."""
    positive = [y for y in y_ms if y > 0]
    if positive and max(positive) / min(positive) > 20:
        ax.set_yscale("log")


def _legend(ax: Axes) -> None:
    """Every series once, and the over-SLO crosses as one entry instead of one per series."""
    lines = ax.get_lines()
    shown = [line for line in lines if not str(line.get_label()).startswith("over SLO")]
    labels = [str(line.get_label()) for line in shown]
    crosses = [line for line in lines if line not in shown]
    if crosses:
        shown.append(crosses[0])
        labels.append("p95 over SLO")
    ax.legend(shown, labels, fontsize=8)

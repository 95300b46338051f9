"""PNG charts of a report: latency percentiles over time with the load, attainment per class.

matplotlib is optional (the `plot` extra) and imported only here, when a chart is drawn;
`available()` says whether it can be.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gateway.offline.report import Summary


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def report_chart(summary: Summary, path: Path) -> Path:
    """Four panels: TTFT p50/p95/p99 and in-flight load over time; offered and served load
    over time; attainment per class over time; attainment per class over the whole run."""
    plt = _pyplot()
    figure, (latency, load, over_time, per_class) = plt.subplots(4, 1, figsize=(9, 13))
    _latency_panel(latency, summary)
    _load_panel(load, summary)
    _attainment_over_time(over_time, summary)
    _attainment_bars(per_class, [summary], by_policy=False)
    figure.suptitle(f"{summary.scenario} - {summary.policy} ({summary.driver})")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def comparison_chart(summaries: Sequence[Summary], path: Path) -> Path:
    plt = _pyplot()
    figure, (bars, latency) = plt.subplots(2, 1, figsize=(9, 8))
    _attainment_bars(bars, summaries, by_policy=True)
    for summary in summaries:
        times = [w.start_s for w in summary.timeline]
        latency.plot(times, [_ms(w.ttft_p95_s) for w in summary.timeline], label=summary.policy)
    latency.set_xlabel("arrival time (s)")
    latency.set_ylabel("TTFT p95 (ms)")
    latency.legend()
    figure.suptitle(f"{summaries[0].scenario}: policies compared ({summaries[0].driver})")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


def _ms(value: float | None) -> float:
    return float("nan") if value is None else value * 1e3


def _latency_panel(axes: Any, summary: Summary) -> None:
    times = [w.start_s for w in summary.timeline]
    for name in ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s"):
        axes.plot(times, [_ms(getattr(w, name)) for w in summary.timeline], label=name[5:8])
    axes.set_ylabel("TTFT (ms)")
    axes.set_xlabel("arrival time (s)")
    axes.legend(loc="upper left")
    load = axes.twinx()
    load.fill_between(times, [w.in_flight for w in summary.timeline], step="post", alpha=0.2)
    load.set_ylabel("requests in flight")


def _load_panel(axes: Any, summary: Summary) -> None:
    times = [w.start_s for w in summary.timeline]
    window_s = summary.timeline[1].start_s if len(summary.timeline) > 1 else 1.0
    for name in ("arrivals", "served"):
        rates = [getattr(w, name) / window_s for w in summary.timeline]
        axes.step(times, rates, where="post", label="offered" if name == "arrivals" else name)
    axes.set_ylabel("requests/s")
    axes.set_xlabel("time (s)")
    axes.legend(loc="upper left")


def _attainment_over_time(axes: Any, summary: Summary) -> None:
    times = [w.start_s for w in summary.timeline]
    classes = sorted({name for w in summary.timeline for name in w.attainment})
    for name in classes:
        values = [w.attainment.get(name) for w in summary.timeline]
        axes.plot(times, [float("nan") if v is None else v * 100 for v in values], label=name)
    axes.set_ylim(0, 105)
    axes.set_ylabel("attainment (%)")
    axes.set_xlabel("arrival time (s)")
    axes.legend(loc="lower left")


def _attainment_bars(axes: Any, summaries: Sequence[Summary], *, by_policy: bool) -> None:
    classes = sorted(
        {
            k.removeprefix("class:")
            for s in summaries
            for k in s.groups
            if k.startswith("class:") and "/" not in k
        }
    )
    width = 0.8 / max(1, len(summaries))
    for offset, summary in enumerate(summaries):
        values = [summary.groups[f"class:{c}"].attainment * 100 for c in classes]
        positions = [i + offset * width for i in range(len(classes))]
        axes.bar(positions, values, width, label=summary.policy if by_policy else None)
    axes.set_xticks([i + width * (len(summaries) - 1) / 2 for i in range(len(classes))], classes)
    axes.set_ylim(0, 105)
    axes.set_ylabel("SLO attainment (%)")
    if by_policy:
        axes.legend()

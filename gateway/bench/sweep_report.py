"""Per-level summaries, the SLO verdict, the printed table and the CSV/JSON files.

Percentiles interpolate linearly between order statistics (numpy's default). Latency percentiles
cover successful requests; a level meets the SLO when p95 TTFT and p95 TPOT are within their
targets and at most 5% of its requests failed (a failed request cannot have met its SLO, so
more than 5% failures is a p95 miss whatever the survivors measured). The highest concurrency
that meets the SLO is the last level before the first miss, so one lucky level above a failing
one does not count.
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gateway.bench.percentile import percentile
from gateway.bench.sweep import LevelRun, SweepSample
from gateway.bench.sweep_client import Measurement

MAX_FAILED_FRACTION = 0.05
_SLO_ITEM = re.compile(r"^(ttft|tpot)=(\d+(?:\.\d+)?)(ms|s)$")


@dataclass(frozen=True, slots=True)
class Slo:
    ttft_s: float | None = None
    tpot_s: float | None = None

    @classmethod
    def parse(cls, text: str) -> Slo:
        """ "ttft=500ms,tpot=50ms" (units ms or s; either target may be left out)."""
        targets: dict[str, float] = {}
        for item in filter(None, (part.strip() for part in text.lower().split(","))):
            match = _SLO_ITEM.match(item)
            if match is None:
                raise ValueError(f"bad SLO item {item!r}; expected e.g. ttft=500ms,tpot=50ms")
            name, number, unit = match.groups()
            targets[f"{name}_s"] = float(number) / (1000 if unit == "ms" else 1)
        if not targets:
            raise ValueError("empty SLO; expected e.g. ttft=500ms,tpot=50ms")
        return cls(**targets)

    def describe(self) -> str:
        targets = (("ttft", self.ttft_s), ("tpot", self.tpot_s))
        parts = [f"{name}<={value * 1000:g}ms" for name, value in targets if value is not None]
        return " ".join(parts) + " at p95"


@dataclass(frozen=True, slots=True)
class Percentiles:
    p50: float | None
    p95: float | None
    p99: float | None

    @classmethod
    def of(cls, values: Sequence[float]) -> Percentiles:
        return cls(percentile(values, 50), percentile(values, 95), percentile(values, 99))


@dataclass(frozen=True, slots=True)
class LevelSummary:
    prompt_tokens: int
    concurrency: int
    requests: int
    failed: int
    ttft_s: Percentiles
    tpot_s: Percentiles
    itl_s: Percentiles
    e2e_s: Percentiles
    output_tokens_per_s_p50: float | None  # per request
    throughput_tokens_per_s: float  # all output tokens over the level's wall time
    requests_per_s: float
    tokens_counted: bool  # some request lacked usage; its tokens were counted from deltas
    prompt_tokens_reported_p50: float | None

    def slo_misses(self, slo: Slo) -> list[str]:
        misses = []
        if slo.ttft_s is not None and not _within(self.ttft_s.p95, slo.ttft_s):
            misses.append("ttft")
        if slo.tpot_s is not None and not _within(self.tpot_s.p95, slo.tpot_s):
            misses.append("tpot")
        if self.failed > MAX_FAILED_FRACTION * self.requests:
            misses.append("errors")
        return misses


def _within(value: float | None, target_s: float) -> bool:
    return value is not None and value <= target_s


def _values(ms: Sequence[Measurement], pick: Callable[[Measurement], float | None]) -> list[float]:
    return [v for m in ms if m.ok and (v := pick(m)) is not None]


def summarize_level(run: LevelRun) -> LevelSummary:
    ms = [r.measurement for r in run.records]
    ok = [m for m in ms if m.ok]
    tokens = sum(m.output_tokens for m in ok)
    wall_s = max(run.wall_s, 1e-9)
    return LevelSummary(
        prompt_tokens=run.level.prompt_tokens,
        concurrency=run.level.concurrency,
        requests=len(ms),
        failed=len(ms) - len(ok),
        ttft_s=Percentiles.of(_values(ms, lambda m: m.ttft_s)),
        tpot_s=Percentiles.of(_values(ms, lambda m: m.tpot_s)),
        itl_s=Percentiles.of([gap for m in ok for gap in m.itl_s]),
        e2e_s=Percentiles.of(_values(ms, lambda m: m.e2e_s)),
        output_tokens_per_s_p50=percentile(_values(ms, lambda m: m.output_tokens_per_s), 50),
        throughput_tokens_per_s=tokens / wall_s,
        requests_per_s=len(ok) / wall_s,
        tokens_counted=any(m.tokens_counted for m in ok),
        prompt_tokens_reported_p50=percentile(_values(ms, lambda m: m.prompt_tokens_reported), 50),
    )


def highest_passing(summaries: Sequence[LevelSummary], slo: Slo) -> dict[int, int | None]:
    """Prompt length -> the highest concurrency below the first level that misses the SLO."""
    best: dict[int, int | None] = {}
    for prompt_tokens in sorted({s.prompt_tokens for s in summaries}):
        best[prompt_tokens] = None
        levels = [s for s in summaries if s.prompt_tokens == prompt_tokens]
        for s in sorted(levels, key=lambda s: s.concurrency):
            if s.slo_misses(slo):
                break
            best[prompt_tokens] = s.concurrency
    return best


def _ms(value_s: float | None) -> str:
    if value_s is None:
        return "-"
    return f"{value_s * 1000:.1f}" if value_s < 0.1 else f"{value_s * 1000:.0f}"


def _s(value_s: float | None) -> str:
    return "-" if value_s is None else f"{value_s:.2f}"


_COLUMNS: tuple[tuple[str, Callable[[LevelSummary], str]], ...] = (
    ("prompt", lambda s: str(s.prompt_tokens)),
    ("conc", lambda s: str(s.concurrency)),
    ("ok", lambda s: f"{s.requests - s.failed}/{s.requests}"),
    ("ttft_p50_ms", lambda s: _ms(s.ttft_s.p50)),
    ("ttft_p95_ms", lambda s: _ms(s.ttft_s.p95)),
    ("ttft_p99_ms", lambda s: _ms(s.ttft_s.p99)),
    ("tpot_p50_ms", lambda s: _ms(s.tpot_s.p50)),
    ("tpot_p95_ms", lambda s: _ms(s.tpot_s.p95)),
    ("tpot_p99_ms", lambda s: _ms(s.tpot_s.p99)),
    ("itl_p99_ms", lambda s: _ms(s.itl_s.p99)),
    ("e2e_p50_s", lambda s: _s(s.e2e_s.p50)),
    ("e2e_p95_s", lambda s: _s(s.e2e_s.p95)),
    ("out_tok/s", lambda s: f"{s.throughput_tokens_per_s:.0f}"),
    ("req/s", lambda s: f"{s.requests_per_s:.2f}"),
)


def render_table(
    summaries: Sequence[LevelSummary], slo: Slo | None = None, *, markdown: bool = False
) -> str:
    """One row per level; with an SLO, a last column says "ok" or which p95 missed."""
    header = [name for name, _ in _COLUMNS] + (["slo"] if slo else [])
    rows = [[cell(s) for _, cell in _COLUMNS] + _slo_cell(s, slo) for s in summaries]
    if markdown:
        lines = [header, ["---:"] * len(header), *rows]
        return "\n".join("| " + " | ".join(row) + " |" for row in lines)
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
        for row in [header, *rows]
    )


def _slo_cell(s: LevelSummary, slo: Slo | None) -> list[str]:
    if slo is None:
        return []
    misses = s.slo_misses(slo)
    return ["MISS " + ",".join(misses) if misses else "ok"]


def render_notes(summaries: Sequence[LevelSummary], slo: Slo | None = None) -> list[str]:
    notes = []
    if any(s.tokens_counted for s in summaries):
        notes.append(
            "note: the endpoint sent no usage; output tokens were counted as one per content "
            "delta (TPOT and tok/s are off if it sends several tokens per delta)"
        )
    reported = {s.prompt_tokens: s.prompt_tokens_reported_p50 for s in summaries}
    if all(v is not None for v in reported.values()):
        pairs = ", ".join(f"{k} -> {v:.0f}" for k, v in sorted(reported.items()) if v is not None)
        notes.append(f"prompt tokens requested -> reported by the server (p50): {pairs}")
    if slo is not None:
        best = highest_passing(summaries, slo)
        verdicts = ", ".join(
            f"prompt {p}: {'none' if c is None else f'concurrency {c}'}" for p, c in best.items()
        )
        notes.append(f"highest concurrency meeting SLO {slo.describe()}: {verdicts}")
    return notes


def render_errors(records: Sequence[SweepSample], limit: int = 5) -> list[str]:
    """The most frequent error messages, with counts."""
    errors = Counter(r.measurement.error for r in records if r.measurement.error is not None)
    return [f"error x{count}: {message}" for message, count in errors.most_common(limit)]


def record_row(record: SweepSample) -> dict[str, Any]:
    """One request as a flat dict (times in ms), for the CSV and JSON files."""
    m = record.measurement

    def ms(value_s: float | None) -> float | None:
        return None if value_s is None else round(value_s * 1000, 3)

    return {
        "prompt_tokens": record.level.prompt_tokens,
        "concurrency": record.level.concurrency,
        "seq": record.seq,
        "sent_at_ms": ms(record.sent_at_s),
        "ok": m.ok,
        "error": m.error,
        "status": m.status,
        "ttft_ms": ms(m.ttft_s),
        "tpot_ms": ms(m.tpot_s),
        "e2e_ms": ms(m.e2e_s),
        "output_tokens": m.output_tokens,
        "tokens_counted": m.tokens_counted,
        "prompt_tokens_reported": m.prompt_tokens_reported,
        "output_tokens_per_s": m.output_tokens_per_s,
        "itl_ms": [ms(gap) for gap in m.itl_s],
    }


REQUEST_FIELDS = (
    *("prompt_tokens", "concurrency", "seq", "sent_at_ms", "ok", "error", "status", "ttft_ms"),
    *("tpot_ms", "e2e_ms", "output_tokens", "tokens_counted", "prompt_tokens_reported"),
    *("output_tokens_per_s", "itl_ms"),
)


def write_csv(records: Sequence[SweepSample], path: Path) -> None:
    """One row per request; the ITL list is joined with ";" to keep one cell."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=REQUEST_FIELDS)
        writer.writeheader()
        for row in map(record_row, records):
            writer.writerow({**row, "itl_ms": ";".join(str(v) for v in row["itl_ms"])})


def write_json(runs: Sequence[LevelRun], slo: Slo | None, meta: dict[str, Any], path: Path) -> None:
    summaries = [summarize_level(run) for run in runs]
    document = {
        "meta": meta,
        "slo": None if slo is None else asdict(slo),
        "highest_passing_concurrency": None if slo is None else highest_passing(summaries, slo),
        "levels": [asdict(s) for s in summaries],
        "requests": [record_row(r) for run in runs for r in run.records],
    }
    path.write_text(json.dumps(document, indent=2) + "\n")

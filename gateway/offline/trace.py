"""Request traces: one row per request, read from and written to JSONL or CSV.

Columns (names are case-insensitive; the first alias found wins)
    arrival_s       seconds from the trace's start   aliases: TIMESTAMP (an ISO date-time or
                    a number of seconds), timestamp (Mooncake: milliseconds)
    prompt_tokens   aliases: ContextTokens (Azure), input_length (Mooncake)
    output_tokens   aliases: GeneratedTokens (Azure), output_length (Mooncake)
    tenant          optional; `default_tenant` when missing
    slo_class       optional (alias: class); `default_class` when missing

So the public Azure LLM inference traces (`TIMESTAMP,ContextTokens,GeneratedTokens`) and the
Mooncake traces (`{"timestamp": ms, "input_length": n, "output_length": n, ...}`) load as they
are. Arrival times are shifted so the earliest request arrives at 0, then sorted.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

_PROMPT = ("prompt_tokens", "contexttokens", "input_length")
_OUTPUT = ("output_tokens", "generatedtokens", "output_length")
_CLASS = ("slo_class", "class")


class TraceError(ValueError):
    """A trace row lacks a column or holds an unusable value; the message names the row."""


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One request of a workload: when it arrives, how long it is, who sends it."""

    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    tenant: str
    slo_class: str


def read_trace(
    path: str | Path, *, default_tenant: str = "default", default_class: str = "default"
) -> list[PlannedRequest]:
    path = Path(path)
    rows = _jsonl_rows(path) if path.suffix in (".jsonl", ".json") else _csv_rows(path)
    parsed = [
        _parse(row, number, default_tenant, default_class)
        for number, row in enumerate(rows, start=1)
    ]
    if not parsed:
        return []
    start = min(r.arrival_s for r in parsed)
    return sorted((replace(r, arrival_s=r.arrival_s - start) for r in parsed), key=_arrival)


def write_trace(path: str | Path, requests: Iterable[PlannedRequest]) -> None:
    path = Path(path)
    with path.open("w", newline="") as out:
        if path.suffix == ".csv":
            writer = csv.DictWriter(out, fieldnames=list(PlannedRequest.__dataclass_fields__))
            writer.writeheader()
            writer.writerows(asdict(r) for r in requests)
        else:
            out.writelines(json.dumps(asdict(r)) + "\n" for r in requests)


def _arrival(request: PlannedRequest) -> float:
    return request.arrival_s


def _jsonl_rows(path: Path) -> Iterator[dict[str, Any]]:
    with path.open() as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def _csv_rows(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(newline="") as lines:
        yield from csv.DictReader(lines)


def _parse(row: Mapping[str, Any], number: int, tenant: str, slo_class: str) -> PlannedRequest:
    lowered = {str(k).strip().lower(): v for k, v in row.items()}
    try:
        return PlannedRequest(
            arrival_s=_arrival_s(lowered),
            prompt_tokens=max(1, int(float(_first(lowered, _PROMPT)))),
            output_tokens=max(1, int(float(_first(lowered, _OUTPUT)))),
            tenant=str(lowered.get("tenant") or tenant),
            slo_class=str(_first(lowered, _CLASS, slo_class)),
        )
    except (KeyError, ValueError) as exc:
        raise TraceError(f"row {number}: {exc}") from None


def _first(row: Mapping[str, Any], names: tuple[str, ...], default: Any = None) -> Any:
    for name in names:
        value = row.get(name)
        if value not in (None, ""):
            return value
    if default is None:
        raise KeyError(f"missing column, expected one of {', '.join(names)}")
    return default


def _arrival_s(row: Mapping[str, Any]) -> float:
    if row.get("arrival_s") not in (None, ""):
        return float(row["arrival_s"])
    value = _first(row, ("timestamp",))
    if isinstance(value, int | float):
        # a number in JSON: Mooncake's `timestamp`, in milliseconds
        return float(value) / 1000
    text = str(value).strip()
    try:
        return float(text)  # a number in a CSV cell: seconds
    except ValueError:
        return datetime.fromisoformat(text).timestamp()

"""Request traces: one row per request, read from and written to JSONL or CSV.

Columns (names are case-insensitive; the first alias found wins)
    arrival_s       seconds from the trace's start   aliases: TIMESTAMP (an ISO date-time or
                    a number of seconds), timestamp (Mooncake: milliseconds)
    prompt_tokens   aliases: ContextTokens (Azure), input_length (Mooncake)
    output_tokens   aliases: GeneratedTokens (Azure), output_length (Mooncake)
    tenant          optional; `default_tenant` when missing (or the value of `tenant_column`)
    slo_class       optional (alias: class); `default_class` when missing (or `class_column`'s)
    hash_ids        optional: the ids of the prompt's blocks, in order (a JSON list, or in a CSV
                    cell ids separated by spaces); requests sharing a leading run of ids shared
                    that prefix in production
    block_tokens    optional: tokens per block of hash_ids (Mooncake: 512, the default)

So the public Azure LLM inference traces (`TIMESTAMP,ContextTokens,GeneratedTokens`), the
Mooncake traces (`{"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]}`)
and BurstGPT (`Timestamp` in seconds, `Request tokens`, `Response tokens`, `Model`, `Log Type`)
load as they are. Arrival times are shifted so the earliest request arrives at 0, then sorted.
A row that cannot be read is a `TraceError` naming the file, the line and the field.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

_PROMPT = ("prompt_tokens", "contexttokens", "input_length", "request tokens")
_OUTPUT = ("output_tokens", "generatedtokens", "output_length", "response tokens")
_CLASS = ("slo_class", "class")
MOONCAKE_BLOCK_TOKENS = 512


class TraceError(ValueError):
    """A trace row lacks a column or holds an unusable value; the message names the row."""


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One request of a workload: when it arrives, how long it is, who sends it, and whether
    it streams (False: its client waits for the whole answer)."""

    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    tenant: str
    slo_class: str
    stream: bool = field(default=True, kw_only=True)  # keyword: subclasses add positionals


@dataclass(frozen=True, slots=True)
class PromptedRequest(PlannedRequest):
    """A planned request with its chat body (what the gateway hashes) and its rendered prompt
    (what the engine hashes, `gateway.sim.wire.prompt_text`)."""

    body: dict[str, Any] | None = None
    text: str | None = None
    # both drivers send turn k `think_s` after turn k-1 ends (closed loop per session)
    session: str | None = None
    turn: int = 0
    think_s: float = 0.0


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One request of a trace as read: a planned request and its prompt's block ids."""

    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    tenant: str
    slo_class: str
    hash_ids: tuple[int, ...] = ()
    block_tokens: int = MOONCAKE_BLOCK_TOKENS

    def request(self) -> PlannedRequest:
        return PlannedRequest(
            self.arrival_s, self.prompt_tokens, self.output_tokens, self.tenant, self.slo_class
        )


@dataclass(frozen=True, slots=True)
class Columns:
    """Where a row's tenant and class come from when the trace has no such columns."""

    default_tenant: str = "default"
    default_class: str = "default"
    tenant_column: str | None = None  # e.g. BurstGPT's `Model`
    class_column: str | None = None  # e.g. BurstGPT's `Log Type`


def read_trace(
    path: str | Path, *, default_tenant: str = "default", default_class: str = "default"
) -> list[PlannedRequest]:
    rows = read_rows(path, Columns(default_tenant, default_class))
    return [row.request() for row in rows]


def read_rows(path: str | Path, columns: Columns = Columns()) -> list[TraceRow]:
    """Every row of the trace, by arrival, the first at 0 s (TraceError naming a bad row)."""
    path = Path(path)
    rows = _jsonl_rows(path) if path.suffix in (".jsonl", ".json") else _csv_rows(path)
    parsed = [_parse(row, f"{path}, line {line}", columns) for line, row in rows]
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


def _arrival(request: TraceRow) -> float:
    return request.arrival_s


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open() as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as exc:
                raise TraceError(f"{path}, line {number}: not JSON ({exc})") from None
            if not isinstance(row, dict):
                raise TraceError(f"{path}, line {number}: expected a JSON object")
            yield number, row


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(newline="") as lines:
        reader = csv.DictReader(lines)
        for row in reader:
            yield reader.line_num, row


def _parse(row: Mapping[str, Any], where: str, columns: Columns) -> TraceRow:
    lowered = {str(k).strip().lower(): v for k, v in row.items()}
    field = "arrival_s or timestamp"
    try:
        arrival_s = _arrival_s(lowered)
        field = _PROMPT[0]
        field, prompt = _first(lowered, _PROMPT)
        prompt_tokens = max(1, int(float(prompt)))
        field = _OUTPUT[0]
        field, output = _first(lowered, _OUTPUT)
        output_tokens = max(1, int(float(output)))
        field = "hash_ids"
        hash_ids = _hash_ids(lowered.get("hash_ids"))
        field = "block_tokens"
        block_tokens = int(lowered.get("block_tokens") or MOONCAKE_BLOCK_TOKENS)
        field = columns.tenant_column or "tenant"
        tenant = _named(lowered, columns.tenant_column, ("tenant",), columns.default_tenant)
        field = columns.class_column or "slo_class"
        slo_class = _named(lowered, columns.class_column, _CLASS, columns.default_class)
    except (KeyError, ValueError, TypeError) as exc:
        raise TraceError(f"{where}: {field}: {_problem(exc)}") from None
    if block_tokens < 1:
        raise TraceError(f"{where}: block_tokens: must be at least 1")
    return TraceRow(
        arrival_s, prompt_tokens, output_tokens, tenant, slo_class, hash_ids, block_tokens
    )


def _problem(exc: Exception) -> str:
    return str(exc.args[0]) if isinstance(exc, KeyError) else str(exc)


def _first(row: Mapping[str, Any], names: tuple[str, ...], default: Any = None) -> tuple[str, Any]:
    for name in names:
        value = row.get(name)
        if value not in (None, ""):
            return name, value
    if default is None:
        raise KeyError(f"missing column, expected one of {', '.join(names)}")
    return names[0], default


def _named(row: Mapping[str, Any], column: str | None, names: tuple[str, ...], default: str) -> str:
    """The value of `column` when one is named (it must be there), else of the first of
    `names` present, else `default`."""
    if column is None:
        return str(_first(row, names, default)[1])
    value = row.get(column.strip().lower())
    if value in (None, ""):
        raise KeyError(f"missing column {column!r}")
    return str(value)


def _hash_ids(value: Any) -> tuple[int, ...]:
    if value in (None, ""):
        return ()
    items = value.replace(",", " ").strip("[] ").split() if isinstance(value, str) else value
    if not isinstance(items, list):
        raise ValueError("expected a list of block ids")
    return tuple(int(item) for item in items)


def _arrival_s(row: Mapping[str, Any]) -> float:
    if row.get("arrival_s") not in (None, ""):
        return float(row["arrival_s"])
    _, value = _first(row, ("timestamp",))
    if isinstance(value, int | float):
        # a number in JSON: Mooncake's `timestamp`, in milliseconds
        return float(value) / 1000
    text = str(value).strip()
    try:
        return float(text)  # a number in a CSV cell: seconds (BurstGPT's `Timestamp`)
    except ValueError:
        return datetime.fromisoformat(text).timestamp()

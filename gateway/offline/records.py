"""One record per request, written by both drivers (Locust and the offline simulator).

Outcome of a request, as a client sees it
    ok      HTTP 200 and a stream that delivered content and ended with [DONE]
    shed    HTTP 429 or 503 carrying `x-slo-gateway-reason` (the gateway refused it on purpose,
            and said why: admission, tenant limits, every upstream rate limited)
    error   anything else: other statuses, connection failures, broken or empty streams

Times are seconds: `arrival_s` when the plan scheduled the request (from the run's start),
`start_s` when it was actually sent (later than arrival when the load generator lagged), and
TTFT / TPOT / E2E measured from `start_s` as a client does (TTFT at the first non-empty
content delta, TPOT = (last − first content delta) / (tokens − 1)).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields, replace
from operator import attrgetter
from pathlib import Path
from typing import Any, Literal, Protocol

Outcome = Literal["ok", "shed", "error"]
SHED_STATUSES = (429, 503)


@dataclass(frozen=True, slots=True)
class LoadRecord:
    request_id: str
    tenant: str
    slo_class: str
    arrival_s: float
    start_s: float
    status: int  # 0: no HTTP response (connection error)
    outcome: Outcome
    reason: str = ""  # x-slo-gateway-reason, or what went wrong
    endpoint: str = ""  # x-slo-gateway-endpoint
    attempts: int = 0  # x-slo-gateway-attempts: upstream attempts the gateway made
    prompt_tokens: int = 0
    output_tokens: int = 0
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    cached_tokens: int = 0  # of the prompt, found in the engine's prefix cache
    decision: str = ""  # x-slo-gateway-decision: the policy's reason (slo_met, explore, ...)
    queued_s: float = 0.0  # offline: from arrival to leaving admission (the deadline queue)
    stream: bool = True  # False: judged by its whole time against the class's answer budget
    # the policy's p95s for the endpoint that answered, TTFT counted from `start_s` as ttft_s is
    predicted_ttft_p95_s: float | None = None
    predicted_tpot_p95_s: float | None = None

    @property
    def lateness_s(self) -> float:
        return self.start_s - self.arrival_s


class Planned(Protocol):
    """What a plan says of a request (`PlannedRequest`, or the load test's `PlannedCall`)."""

    @property
    def tenant(self) -> str: ...
    @property
    def slo_class(self) -> str: ...
    @property
    def arrival_s(self) -> float: ...
    @property
    def prompt_tokens(self) -> int: ...


def unserved(
    request_id: str,
    planned: Planned,
    status: int,
    reason: str,
    *,
    shed: bool = False,
    attempts: int = 0,
    e2e_s: float | None = None,
) -> LoadRecord:
    """A request that got no answer: refused on purpose by the gateway (`shed`), or failed."""
    return _record(
        request_id,
        planned,
        status=status,
        outcome=classify(status, reason if shed else None, completed=False),
        reason=reason,
        attempts=attempts,
        e2e_s=e2e_s,
    )


def served(
    planned: Planned,
    request_id: str,
    flight: tuple[str, int, int, str],
    first_s: float,
    now_s: float,
    tpot_s: float | None,
    cached_tokens: int | None,
    queued_s: float = 0.0,
    predicted_p95s: tuple[float | None, float | None] = (None, None),
) -> LoadRecord:
    """A request the simulator served: `flight` = (endpoint, attempts, output tokens, the
    policy's reason); `queued_s`: how long it waited for admission; `predicted_p95s`: its TTFT
    (from its arrival) and TPOT p95s."""
    endpoint, attempts, tokens, decision = flight
    return _record(
        request_id,
        planned,
        status=200,
        outcome="ok",
        endpoint=endpoint,
        attempts=attempts,
        output_tokens=tokens,
        ttft_s=first_s - planned.arrival_s,
        tpot_s=tpot_s,
        e2e_s=now_s - planned.arrival_s,
        cached_tokens=cached_tokens or 0,
        decision=decision,
        queued_s=queued_s,
        predicted_ttft_p95_s=predicted_p95s[0],
        predicted_tpot_p95_s=predicted_p95s[1],
    )


def whole_answer(record: LoadRecord) -> LoadRecord:
    """`record` as a client that did not stream saw it: the whole answer, no first token."""
    return replace(record, stream=False, ttft_s=None, tpot_s=None)


def _record(request_id: str, planned: Planned, **result: Any) -> LoadRecord:
    """A record of `planned` with its `result` fields, started when it arrived."""
    return LoadRecord(
        request_id=request_id,
        tenant=planned.tenant,
        slo_class=planned.slo_class,
        arrival_s=planned.arrival_s,
        start_s=planned.arrival_s,
        prompt_tokens=planned.prompt_tokens,
        **result,
    )


def classify(status: int, reason: str | None, completed: bool) -> Outcome:
    """The outcome of a request from its status, gateway reason header and stream end."""
    if status == 200 and completed:
        return "ok"
    if status in SHED_STATUSES and reason:
        return "shed"
    return "error"


_FIELDS = tuple(f.name for f in fields(LoadRecord))
_VALUES = attrgetter(*_FIELDS)


def record_line(record: LoadRecord) -> str:
    """One JSONL line; `dataclasses.asdict` would cost several times more (it deep-copies each
    value), and a run writes one line per request. `cached_tokens` only when some were,
    `decision` only when the gateway gave one (not for a refusal or a failure), `stream` only
    for a request that did not stream, and the predicted p95s only when made."""
    line = dict(zip(_FIELDS, _VALUES(record), strict=True))
    if not record.cached_tokens:
        del line["cached_tokens"]
    if not record.decision:
        del line["decision"]
    if record.stream:
        del line["stream"]
    for name in ("predicted_ttft_p95_s", "predicted_tpot_p95_s"):
        if line[name] is None:
            del line[name]
    return json.dumps(line) + "\n"


def write_records(path: str | Path, records: Iterable[LoadRecord]) -> None:
    with Path(path).open("w") as out:
        out.writelines(map(record_line, records))


def read_records(path: str | Path) -> list[LoadRecord]:
    return list(_read(Path(path)))


def _read(path: Path) -> Iterator[LoadRecord]:
    with path.open() as lines:
        for line in lines:
            if line.strip():
                yield LoadRecord(**json.loads(line))

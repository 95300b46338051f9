"""The replay plan handed from the runner (`loadtests/live.py`) to the locustfile, as JSON.

The runner writes it; Locust, a separate process, reads it from the path in the environment
variable `SLO_LOADTEST_PLAN`. It holds everything the users need and nothing they must compute:
the requests with their arrival times, the tenants' API keys, the fault patches to send, how
many users each (tenant, class) group gets, and where to write the records.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import Field

from gateway.bench.api_events import Api
from gateway.config.strict_model import StrictModel
from gateway.offline.trace import PlannedRequest

PLAN_ENV = "SLO_LOADTEST_PLAN"
ASSUMED_TOKEN_S = 0.05  # per output token, to size the user pools generously
ASSUMED_FIRST_TOKEN_S = 2.0
POOL_HEADROOM = 1.5


class PlannedCall(StrictModel):
    index: int
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    tenant: str
    slo_class: str
    # the chat messages, for plans that carry text (gateway/offline/prefix_scenarios.py)
    messages: list[dict[str, Any]] | None = None
    # a session's turn: sent `think_s` after its previous turn ended (closed loop per session)
    session: str | None = None
    turn: int = 0
    think_s: float = 0.0

    @property
    def group(self) -> str:
        return group_name(self.tenant, self.slo_class)


class TimedFault(StrictModel):
    at_s: float
    url: str  # the member's /sim/faults
    patch: dict[str, Any]


class Plan(StrictModel):
    scenario: str
    model: str
    api: Api = "chat"  # the API every request is sent through
    keys: dict[str, str]  # tenant -> API key
    calls: list[PlannedCall]
    faults: list[TimedFault] = Field(default_factory=list)
    pools: dict[str, int]  # group -> users
    records: str  # JSONL path the users append to
    duration_s: float
    drain_s: float

    def save(self, path: Path) -> None:
        path.write_text(self.model_dump_json())

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        return cls.model_validate_json(Path(path).read_text())


def group_name(tenant: str, slo_class: str) -> str:
    return f"{tenant}.{slo_class}"


def calls(requests: Sequence[PlannedRequest]) -> list[PlannedCall]:
    return [
        PlannedCall(
            index=i,
            arrival_s=r.arrival_s,
            prompt_tokens=r.prompt_tokens,
            output_tokens=r.output_tokens,
            tenant=r.tenant,
            slo_class=r.slo_class,
            messages=_messages(r),
            session=getattr(r, "session", None),
            turn=getattr(r, "turn", 0),
            think_s=getattr(r, "think_s", 0.0),
        )
        for i, r in enumerate(requests)
    ]


def _messages(request: PlannedRequest) -> list[dict[str, Any]] | None:
    body = getattr(request, "body", None)
    return list(body["messages"]) if isinstance(body, dict) else None


def pools(planned: Sequence[PlannedCall], max_users: int) -> dict[str, int]:
    """Users per group: enough for its peak concurrency if every request were slow, capped so
    the groups together stay within `max_users`."""
    peaks = {g: _peak([c for c in planned if c.group == g]) for g in {c.group for c in planned}}
    wanted = {g: math.ceil(p * POOL_HEADROOM) + 1 for g, p in peaks.items()}
    total = sum(wanted.values())
    if total <= max_users:
        return wanted
    return {g: max(1, math.floor(w * max_users / total)) for g, w in wanted.items()}


def _peak(group: Sequence[PlannedCall]) -> int:
    edges = []
    for call in group:
        end_s = call.arrival_s + ASSUMED_FIRST_TOKEN_S + ASSUMED_TOKEN_S * call.output_tokens
        edges += [(call.arrival_s, 1), (end_s, -1)]
    level = peak = 0
    for _, step in sorted(edges):
        level += step
        peak = max(peak, level)
    return peak

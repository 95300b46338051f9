"""Usage accounting and budgets in the shared store: what one finished request settles, the
budget windows, and the hourly usage buckets both stores keep.

Money is counted in whole pico-USD (1e-12 USD, `PUSD`): integer increments add up exactly in any
order on any replica (Redis INCRBY), where float dollars summed by several replicas would not,
and prices per 1M tokens with up to six decimals cost a whole number of pico-USD per token. An
int64 holds 9.2 million USD, beyond any tenant's monthly spend.

Budget windows are UTC calendar days and months, numbered from `now` alone (every replica agrees):
a day is `floor(now / 86400)`, a month `year * 12 + month - 1`.

Usage buckets: one hash per tenant and UTC hour, one field per (class, model, endpoint, metric),
so one settlement touches only its tenant's keys (one Redis Cluster slot, one script).

The records are NamedTuples, not frozen dataclasses: one of each is made per request, and a
frozen dataclass's __init__ costs several times more.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import lru_cache
from typing import NamedTuple

PUSD = 1e12  # pico-USD per USD
DAY_S = 86400
HOUR_S = 3600
METRICS = ("requests", "prompt_tokens", "cached_tokens", "completion_tokens", "cost_pusd")
_SEP = "\x1f"  # between a usage field's parts: no model or endpoint name contains it


class BudgetQuota(NamedTuple):
    """A tenant's spend limits in pico-USD (None: no limit) and its soft alert fraction."""

    day_pusd: int | None = None
    month_pusd: int | None = None
    soft_fraction: float | None = None

    def soft(self, limit: int | None) -> int | None:
        """The spend that raises the soft alert for a window with this limit."""
        if limit is None or self.soft_fraction is None:
            return None
        return math.ceil(limit * self.soft_fraction)


NO_BUDGET = BudgetQuota()  # a tenant without one: its spend is kept, nothing is watched


class UsageLine(NamedTuple):
    """What one request used, under the group it is accounted to (or `requests` of them, added
    up: gateway/core/accounting.py's `UsageBatch`)."""

    slo_class: str
    model: str
    endpoint: str
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    cost_pusd: int
    requests: int = 1

    def fields(self) -> dict[str, int]:
        """The usage-bucket increments: field name -> amount."""
        names = field_names(self.slo_class, self.model, self.endpoint)
        amounts = (
            self.requests,
            self.prompt_tokens,
            self.cached_tokens,
            self.completion_tokens,
            self.cost_pusd,
        )
        return dict(zip(names, amounts, strict=True))


@lru_cache(maxsize=4096)
def field_names(slo_class: str, model: str, endpoint: str) -> tuple[str, ...]:
    """A group's usage-bucket field names, one per metric (made once per group)."""
    group = _SEP.join((slo_class, model, endpoint))
    return tuple(f"{group}{_SEP}{metric}" for metric in METRICS)


class Settlement(NamedTuple):
    """What a request settles in one write, at its end or while it streams: its tokens moved
    from the reservation to the window as they are used, its spend, its usage buckets and its
    budget hold given back.

    Tokens: `token_refund` leaves the slot the reservation was charged to (`token_slot`; none
    once that slot has left the window) and `token_charge` goes to the slot of `at_s`, so a
    window counts a stream's tokens when they are streamed, however long it runs, and holds
    room for those not streamed yet. A charge may be negative (the upstream reported fewer
    prompt tokens than the estimate already charged)."""

    tenant: str
    at_s: float
    token_slot: int | None  # the tokens-window slot charged at admission; None: none charged
    token_refund: int  # tokens of the reservation given back (taken from `token_slot`)
    token_charge: int  # tokens used since the last settlement (added to the current slot)
    window_s: float  # the tokens window's length (for its TTL)
    usage: UsageLine | None  # None: no upstream answered, nothing used (or still streaming)
    budget: BudgetQuota | None = None
    hold_id: str | None = None  # the budget hold taken at admission, released here
    hold_pusd: int = 0


class UsageRow(NamedTuple):
    hour: int  # UTC hours since the epoch
    tenant: str
    slo_class: str
    model: str
    endpoint: str
    metrics: dict[str, int]


def day_index(now: float) -> int:
    return math.floor(now / DAY_S)


def month_index(now: float) -> int:
    return _month_of_day(day_index(now))


@lru_cache(maxsize=64)
def _month_of_day(day: int) -> int:
    """Every request settles in a month: computed once a day, not per request."""
    moment = datetime.fromtimestamp(day * DAY_S, UTC)
    return moment.year * 12 + moment.month - 1


def hour_index(now: float) -> int:
    return math.floor(now / HOUR_S)


def day_reset_s(now: float) -> float:
    """Seconds until the next UTC midnight."""
    return (day_index(now) + 1) * DAY_S - now


def month_reset_s(now: float) -> float:
    """Seconds until the first of the next UTC month."""
    following = month_index(now) + 1
    start = datetime(following // 12, following % 12 + 1, 1, tzinfo=UTC)
    return start.timestamp() - now


def rows(tenant: str, hour: int, bucket: Mapping[str, int]) -> list[UsageRow]:
    """One bucket's fields as rows, one per group."""
    groups: dict[tuple[str, str, str], dict[str, int]] = {}
    for name, amount in bucket.items():
        parts = name.split(_SEP)
        if len(parts) != 4:
            continue  # not a usage field (a newer layout): skipped, not misread
        slo_class, model, endpoint, metric = parts
        groups.setdefault((slo_class, model, endpoint), dict.fromkeys(METRICS, 0))[metric] = amount
    return [UsageRow(hour, tenant, *group, metrics) for group, metrics in groups.items()]


Group = tuple[str, str, str]  # slo_class, model, endpoint


def add_line(groups: dict[Group, list[int]], line: UsageLine) -> None:
    """Add `line` to its group's amounts (METRICS order), as its fields would add up."""
    group = (line.slo_class, line.model, line.endpoint)
    amounts = groups.get(group)
    if amounts is None:
        amounts = groups[group] = [0] * len(METRICS)
    amounts[0] += line.requests
    amounts[1] += line.prompt_tokens
    amounts[2] += line.cached_tokens
    amounts[3] += line.completion_tokens
    amounts[4] += line.cost_pusd


def group_rows(tenant: str, hour: int, groups: Mapping[Group, list[int]]) -> list[UsageRow]:
    """`add_line`'s groups as rows, the same as `rows` reads from the fields."""
    return [
        UsageRow(hour, tenant, *group, dict(zip(METRICS, amounts, strict=True)))
        for group, amounts in groups.items()
    ]

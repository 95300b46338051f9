"""Tenant accounting, pure: what a request costs, what it settles, and the limit headers.

A tenant's tokens limit is charged the estimate at admission (prompt estimate + max_tokens) and
settled when the request ends: `actual - reserved` is added to the window slot the reservation
went to (`Settlement.token_slot`), so the window holds real usage whatever the estimate. Actual
is what the upstream reported (prompt + completion), else what the gateway counted (a stream cut
mid-way: its streamed tokens; a prompt never reported: its estimate); a request no upstream
answered used nothing and gets all of its reservation back.

Limit headers follow OpenAI's names and formats: `x-ratelimit-limit-requests`,
`x-ratelimit-remaining-requests`, `x-ratelimit-reset-requests` ("1s", "6m0s", "250ms"), and the
same for tokens. The reset is when capacity next comes back: when the oldest slot holding
anything leaves the sliding window (gateway/state/rate.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from gateway.config.settings import Price, TenantBudget
from gateway.state.rate import RATE_SLOTS
from gateway.state.store import TenantAdmission, TenantQuota
from gateway.state.usage import (
    HOUR_S,
    PUSD,
    BudgetQuota,
    Group,
    UsageLine,
    add_line,
    day_reset_s,
    hour_index,
    month_reset_s,
)

Headers = tuple[tuple[bytes, bytes], ...]


def cost_pusd(price: Price, prompt: int, cached: int, completion: int) -> int:
    """Pico-USD at `price` (prices are per 1M tokens: x 1e6 pico-USD); see `_micro_usd`. A free
    endpoint (a self-hosted engine's usual price) costs 0 without the arithmetic: this runs
    once per request."""
    if not (price.input_per_1m or price.output_per_1m or price.cached_input_per_1m):
        return 0
    return round(_micro_usd(price, prompt, cached, completion) * 1e6)


def cost_usd(price: Price, prompt: int, cached: int, completion: int) -> float:
    """USD at `price`, unrounded: the offline report's cost, by the live accounting's formula."""
    return _micro_usd(price, prompt, cached, completion) / 1e6


def _micro_usd(price: Price, prompt: int, cached: int, completion: int) -> float:
    """Uncached prompt tokens at the input rate, cached ones at the cached rate, completion at
    the output rate. With no cached tokens the sum is exactly prompt x input + completion x
    output (adding 0.0 rounds nothing), so uncached costs are the same floats as before."""
    cached = min(cached, prompt)
    return (
        (prompt - cached) * price.input_per_1m
        + cached * price.cached_input_rate
        + completion * price.output_per_1m
    )


def predicted_hold_pusd(
    prices: Iterable[Price], budget: BudgetQuota | None, prompt: int, output: int
) -> int:
    """What a request is expected to cost (`prompt` + `output` tokens at the dearest of the
    `prices` of the endpoints that may serve it), held against its tenant's budget until it
    settles; 0 without a budget. Capped at the smallest limit, as a token reservation is at
    its limit: a request dearer than the whole budget is admitted into an untouched day or
    month, and settles on its real cost."""
    if budget is None:
        return 0
    cost = max((cost_pusd(price, prompt, 0, output) for price in prices), default=0)
    limits = [limit for limit in (budget.day_pusd, budget.month_pusd) if limit is not None]
    return min([cost, *limits])


def usd(pusd: int) -> float:
    return pusd / PUSD


def budget_quota(budget: TenantBudget | None) -> BudgetQuota | None:
    if budget is None:
        return None
    return BudgetQuota(
        day_pusd=_pusd(budget.usd_per_day),
        month_pusd=_pusd(budget.usd_per_month),
        soft_fraction=budget.soft_alert_fraction,
    )


def _pusd(amount: float | None) -> int | None:
    return None if amount is None else round(amount * PUSD)


def budget_retry_after_s(budget: BudgetQuota, admission: TenantAdmission, now: float) -> float:
    """Until every exhausted window has reset: a spent month outlasts any day."""
    waits = [0.0]
    if budget.day_pusd is not None and admission.spend_day_pusd >= budget.day_pusd:
        waits.append(day_reset_s(now))
    if budget.month_pusd is not None and admission.spend_month_pusd >= budget.month_pusd:
        waits.append(month_reset_s(now))
    return max(waits)


def reset_s(oldest: int | None, window_s: float, now: float) -> float:
    """Seconds until the oldest used slot leaves the window (0: nothing used)."""
    if oldest is None:
        return 0.0
    return max(0.0, (oldest + RATE_SLOTS) * window_s / RATE_SLOTS - now)


def limit_headers(quota: TenantQuota, admission: TenantAdmission, now: float) -> Headers:
    found: list[tuple[bytes, bytes]] = []
    windows = (
        ("requests", quota.requests, admission.requests_used, admission.requests_oldest),
        ("tokens", quota.tokens, admission.tokens_used, admission.tokens_oldest),
    )
    for name, limit, used, oldest in windows:
        if limit is None:
            continue
        reset = duration(reset_s(oldest, quota.window_s, now))
        found += [
            (b"x-ratelimit-limit-" + name.encode(), str(limit).encode()),
            (b"x-ratelimit-remaining-" + name.encode(), str(max(0, limit - used)).encode()),
            (b"x-ratelimit-reset-" + name.encode(), reset.encode()),
        ]
    return tuple(found)


def duration(seconds: float) -> str:
    """Go's duration format as OpenAI writes these headers: "250ms", "1s", "6m0s", "1h2m3s".
    Whole seconds from one second up (rounded up: retrying at the reset must not be early)."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    whole = math.ceil(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


class UsageBatch:
    """Usage lines with nothing exact to settle (no tokens limit charged, no budget), added up
    per tenant, UTC hour and group, as the memory store keeps them (`add_line`), to be settled
    together (`drain`).

    Over the memory store a settlement per request cost more than the rest of its accounting:
    about 3% of a non-streamed relay's throughput, most of it the write's own machinery (a
    coroutine run to its end, the store's bookkeeping), and the sums it keeps are read only by
    GET /admin/usage, which drains first. A drained line carries its group's request count and
    the start of its hour as its time: the hour, day and month a store files it under are those
    of every request in it.
    """

    def __init__(self) -> None:
        self._pending: dict[tuple[str, int], dict[Group, list[int]]] = {}  # (tenant, hour)

    def add(self, tenant: str, at_s: float, line: UsageLine) -> None:
        key = (tenant, hour_index(at_s))
        groups = self._pending.get(key)
        if groups is None:
            groups = self._pending[key] = {}
        add_line(groups, line)

    def drain(self) -> list[tuple[str, float, UsageLine]]:
        """Each group's sums since the last drain: (tenant, its hour's start, the line)."""
        pending, self._pending = self._pending, {}
        drained = []
        for (tenant, hour), groups in pending.items():
            for group, amounts in groups.items():
                requests, prompt, cached, completion, cost = amounts  # METRICS order
                line = UsageLine(*group, prompt, cached, completion, cost, requests)
                drained.append((tenant, float(hour * HOUR_S), line))
        return drained

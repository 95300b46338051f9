"""What the Redis store sends its scripts and what their replies mean: pure builders of keys and
arguments, and parsers of replies (`gateway/state/redis_store.py` makes the calls).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.state import keys, usage, window
from gateway.state.breaker import BreakerState
from gateway.state.keys import KeySpace
from gateway.state.rate import slot_range, slot_ttl_s
from gateway.state.store import Alerted, EndpointStats
from gateway.state.usage import NO_BUDGET, Settlement
from policies.fair_share import Counters

NO_LIMIT = -1


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def stored_number(value: bytes | str | None) -> float:
    return float(value) if value is not None else 0.0


def settle_call(
    keyspace: KeySpace, retention_s: float, settlement: Settlement
) -> tuple[list[str], list[str | int | float]]:
    """The settle script's keys (all of the tenant's slot) and arguments."""
    tenant, at = settlement.tenant, settlement.at_s
    day, month = usage.day_index(at), usage.month_index(at)
    keys_ = [
        keyspace.tenant(tenant, "tokens"),
        keyspace.spend(tenant, "d", day),
        keyspace.spend(tenant, "m", month),
        keyspace.budget_alert(tenant, "d", day),
        keyspace.budget_alert(tenant, "m", month),
        keyspace.usage(tenant, usage.hour_index(at)),
        keyspace.budget_holds(tenant),
        keyspace.budget_held(tenant),
    ]
    budget = settlement.budget or NO_BUDGET
    line = settlement.usage
    hold_id = settlement.hold_id
    args: list[str | int | float] = [
        NO_LIMIT if settlement.token_slot is None else settlement.token_slot,
        settlement.token_refund,
        line.cost_pusd if line else 0,
        keys.ttl_ms(usage.day_reset_s(at) + keys.SPEND_TTL_MARGIN_S),
        keys.ttl_ms(usage.month_reset_s(at) + keys.SPEND_TTL_MARGIN_S),
        limit_arg(budget.soft(budget.day_pusd)),
        limit_arg(budget.soft(budget.month_pusd)),
        keys.ttl_ms(retention_s),
        slot_range(at, settlement.window_s)[0],
        settlement.token_charge,
        keys.ttl_ms(slot_ttl_s(settlement.window_s)),
        hold_member(hold_id, settlement.hold_pusd) if hold_id is not None else "",
        settlement.hold_pusd,
    ]
    for name, amount in (line.fields() if line else {}).items():
        args += [name, amount]
    return keys_, args


def hold_member(request_id: str, hold_pusd: int) -> str:
    """A budget hold in its zset: the amount first, so a script sums holds from members."""
    return f"{hold_pusd}:{request_id}"


def lease_args(request_id: str, ttl_s: float, now: float, limit: int) -> list[Any]:
    return [now, now + ttl_s, request_id, keys.ttl_ms(ttl_s + keys.TTL_MARGIN_S), limit]


def limit_arg(value: int | None) -> int:
    return NO_LIMIT if value is None else value


def slot_of(value: int) -> int | None:
    return None if int(value) < 0 else int(value)


def announce(reply: Sequence[Any], alerted: Alerted | None) -> None:
    """Tell `alerted` of the soft alerts a settle script's reply says it raised."""
    if alerted is None:
        return
    for name, raised in zip(("day", "month"), reply, strict=True):
        if int(raised):
            alerted(name)


def stats_of(replies: Sequence[Any], weights: Sequence[float]) -> EndpointStats:
    in_flight, health_reply, *rest = replies
    buckets, fast = rest[: len(weights)], rest[len(weights) :]
    health = decoded(health_reply)
    fields = (
        (weight, name, value)
        for weight, bucket in zip(weights, buckets, strict=True)
        for name, value in bucket.items()
    )
    sums, weighted = window.merge(fields)
    return EndpointStats(
        in_flight=int(in_flight),
        latency=window.estimate(decoded(sums), decoded(weighted), fast_sums(fast)),
        breaker=BreakerState(
            int(health.get("fails", 0.0)),
            health.get("open_until", 0.0),
            health.get("trial_until", 0.0),
        ),
        cooldown_until_s=health.get("cool_until", 0.0),
    )


def fast_sums(buckets: Sequence[Mapping[Any, Any]]) -> dict[str, float]:
    fields = ((1.0, name, value) for bucket in buckets for name, value in bucket.items())
    sums, _ = window.merge(fields)
    return decoded(sums)


def decoded(reply: Mapping[Any, Any]) -> dict[str, float]:
    return {text(name): float(value) for name, value in reply.items()}


def fair_counters(reply: Sequence[Any]) -> Counters:
    """The fair_charge script's flat reply (key, tokens, seen, ...) as counters."""
    tokens, seen_s = {}, {}
    for i in range(0, len(reply), 3):
        key = text(reply[i])
        tokens[key], seen_s[key] = float(reply[i + 1]), float(reply[i + 2])
    return Counters(tokens, seen_s)

"""Fair share inside a class: a virtual token counter per fairness key (Sheng et al., "Fairness
in Serving Large Language Models", OSDI 2024).

Each fairness key (a tenant, or a sub-tenant it lets clients name) has a counter of the tokens
it was served, weighted by its tenant's `weight` (> 0, default 1):
    served = (prompt_tokens − cached_tokens + output_tokens) / weight
When requests of one class wait, the one whose key has the least counter goes next (ties: the
earliest deadline, then first come); classes keep their order (earliest deadline first,
policies/deadline_queue.py). Work-conserving: the counter only orders who waits; a request
that finds headroom is admitted at once whatever its counter.

No banked credit: a key is active while it was charged within `active_s`. A key that is not
(new, or idle since) counts from `floor`, the least counter of the active keys (with none
active, the largest known: every returning key starts level), and is lifted to it when next
charged (atomically, by the store: gateway/state/lua/fair_charge.lua mirrors `charged`).

Pure: counters and the caller's clock in, numbers out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

ACTIVE_S = 30.0  # a key charged within this long counts as active
FORGET_S = 10 * ACTIVE_S  # a key not charged for this long is forgotten


class Counters(NamedTuple):
    """One class's counters as the store holds them, by fairness key."""

    tokens: Mapping[str, float]  # weighted served tokens
    seen_s: Mapping[str, float]  # when last charged (unix s)


NO_COUNTERS = Counters({}, {})


def served_tokens(prompt_tokens: int, cached_tokens: int, output_tokens: int) -> int:
    """What a request cost the fleet: its uncached prompt and its output."""
    return max(0, prompt_tokens - cached_tokens) + output_tokens


def floor(counters: Counters, now_s: float, active_s: float = ACTIVE_S) -> float:
    """Where a key that is not active starts: the least active counter, else the largest."""
    since_s = now_s - active_s
    active = [t for key, t in counters.tokens.items() if counters.seen_s.get(key, 0.0) >= since_s]
    if active:
        return min(active)
    return max(counters.tokens.values(), default=0.0)


def level(
    counters: Counters, key: str, now_s: float, lowest: float, active_s: float = ACTIVE_S
) -> float:
    """The key's counter as ordering reads it: lifted to `lowest` (`floor`) unless active."""
    tokens = counters.tokens.get(key, 0.0)
    if counters.seen_s.get(key, -1.0) >= now_s - active_s:
        return tokens
    return tokens if tokens > lowest else lowest


def charged(
    counters: Counters,
    charges: Mapping[str, float],
    now_s: float,
    active_s: float = ACTIVE_S,
    forget_s: float = FORGET_S,
) -> Counters:
    """The counters after `charges` (weighted tokens by key, negative to correct an estimate):
    each charged key lifted first (`level`, with the floor before this batch), then added to
    and marked seen; keys not charged within `forget_s` are forgotten."""
    lowest = floor(counters, now_s, active_s)
    tokens, seen_s = dict(counters.tokens), dict(counters.seen_s)
    for key, amount in charges.items():
        tokens[key] = level(counters, key, now_s, lowest, active_s) + amount
        seen_s[key] = now_s
    kept = {key for key, at_s in seen_s.items() if at_s >= now_s - forget_s}
    return Counters({k: v for k, v in tokens.items() if k in kept}, {k: seen_s[k] for k in kept})

"""The circuit breaker as a pure state machine over shared state.

State (one per endpoint, shared by every replica through the store):
    failures        consecutive failures seen by all replicas
    open_until_s    0 = never opened since the last success; otherwise the end of the cooldown
    trial_until_s   while half-open, the end of the trial someone has claimed

Phase at time `now`:
    closed      open_until_s == 0
    open        now < open_until_s                       (no traffic)
    half_open   open_until_s <= now, the cooldown is over (one trial at a time)

Transitions (`after_result`, `after_trial_claim`):
    success, unless open            -> closed, failures reset (a success while open came from a
                                       request sent before the breaker opened: ignored)
    failure                         -> failures + 1; opens for `cooldown_s` when closed and the
                                       count reaches `failure_threshold`, or when half-open
    claim a trial while half-open   -> granted if no unexpired trial is held; the claim holds
                                       for `trial_timeout_s`, so a trial whose replica crashed
                                       is retried by another

`MemoryStatsStore` applies these functions; `lua/breaker_*.lua` is the same logic run atomically
in Redis. The contract suite runs one scenario against both.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

Phase = Literal["closed", "open", "half_open"]


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    failure_threshold: int = 5
    cooldown_s: float = 30.0
    trial_timeout_s: float = 10.0


@dataclass(frozen=True, slots=True)
class BreakerState:
    failures: int = 0
    open_until_s: float = 0.0
    trial_until_s: float = 0.0

    def phase(self, now: float) -> Phase:
        if self.open_until_s == 0:
            return "closed"
        return "open" if now < self.open_until_s else "half_open"


def after_result(
    state: BreakerState, *, ok: bool, now: float, policy: BreakerPolicy
) -> BreakerState:
    phase = state.phase(now)
    if ok:
        return state if phase == "open" else BreakerState()
    failures = state.failures + 1
    trips = phase == "half_open" or (phase == "closed" and failures >= policy.failure_threshold)
    if trips:
        return BreakerState(failures, open_until_s=now + policy.cooldown_s)
    return replace(state, failures=failures)


def after_trial_claim(
    state: BreakerState, *, now: float, policy: BreakerPolicy
) -> BreakerState | None:
    """The state with the trial claimed, or None when no trial may start now."""
    if state.phase(now) != "half_open" or state.trial_until_s > now:
        return None
    return replace(state, trial_until_s=now + policy.trial_timeout_s)

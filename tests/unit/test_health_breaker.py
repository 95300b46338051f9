"""The breaker's pure transitions (stats/breaker.py), table-driven."""

from __future__ import annotations

import pytest

from gateway.state.breaker import (
    BreakerPolicy,
    BreakerState,
    Phase,
    after_result,
    after_trial_claim,
)
from gateway.watch.health import is_failure

POLICY = BreakerPolicy(failure_threshold=3, cooldown_s=10.0, trial_timeout_s=4.0)
CLOSED = BreakerState()
TWO_FAILURES = BreakerState(failures=2)
OPEN = BreakerState(failures=3, open_until_s=110.0)  # opened at 100
TRIAL = BreakerState(failures=3, open_until_s=110.0, trial_until_s=115.0)


@pytest.mark.parametrize(
    ("state", "now", "phase"),
    [
        (CLOSED, 100.0, "closed"),
        (TWO_FAILURES, 100.0, "closed"),
        (OPEN, 109.9, "open"),
        (OPEN, 110.0, "half_open"),
        (TRIAL, 112.0, "half_open"),
    ],
)
def test_phase(state: BreakerState, now: float, phase: Phase) -> None:
    assert state.phase(now) == phase


@pytest.mark.parametrize(
    ("state", "ok", "now", "after"),
    [
        (CLOSED, False, 100.0, BreakerState(failures=1)),
        (TWO_FAILURES, True, 100.0, CLOSED),
        (TWO_FAILURES, False, 100.0, BreakerState(failures=3, open_until_s=110.0)),
        (OPEN, False, 105.0, BreakerState(failures=4, open_until_s=110.0)),  # stays open
        (OPEN, True, 105.0, OPEN),  # a request sent before it opened
        (OPEN, True, 111.0, CLOSED),  # half-open: success closes
        (OPEN, False, 111.0, BreakerState(failures=4, open_until_s=121.0)),  # reopens
        (TRIAL, True, 112.0, CLOSED),
        (TRIAL, False, 112.0, BreakerState(failures=4, open_until_s=122.0)),
    ],
)
def test_after_result(state: BreakerState, ok: bool, now: float, after: BreakerState) -> None:
    assert after_result(state, ok=ok, now=now, policy=POLICY) == after


@pytest.mark.parametrize(
    ("state", "now", "after"),
    [
        (CLOSED, 100.0, None),
        (OPEN, 105.0, None),
        (OPEN, 110.0, BreakerState(failures=3, open_until_s=110.0, trial_until_s=114.0)),
        (TRIAL, 114.9, None),  # someone holds the trial
        (TRIAL, 115.0, BreakerState(failures=3, open_until_s=110.0, trial_until_s=119.0)),
    ],
)
def test_after_trial_claim(state: BreakerState, now: float, after: BreakerState | None) -> None:
    assert after_trial_claim(state, now=now, policy=POLICY) == after


@pytest.mark.parametrize(
    ("status", "failure"),
    [(0, True), (500, True), (502, True), (529, True), (200, False), (400, False), (429, False)],
)
def test_which_outcomes_count_against_the_breaker(status: int, failure: bool) -> None:
    assert is_failure(status) == failure

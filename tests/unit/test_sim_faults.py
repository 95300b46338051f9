"""Fault state of the simulated servers: runtime patches, delayed slowdowns, seeded draws."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.sim.faults import Faults, FaultState


def test_slowdown_waits_for_its_delay_from_the_patch_time() -> None:
    state = FaultState(Faults(), now_s=100.0)
    state.update({"slowdown": 5.0, "slowdown_at_s": 2.0}, now_s=200.0)
    assert state.slowdown(201.9) == 1.0
    assert state.slowdown(202.0) == 5.0


def test_patches_merge_and_are_validated() -> None:
    state = FaultState(Faults(error_rate=0.5), now_s=0.0)
    merged = state.update({"hang": True}, now_s=1.0)
    assert (merged.error_rate, merged.hang) == (0.5, True)
    with pytest.raises(ValidationError):
        state.update({"error_rate": 1.5}, now_s=2.0)
    assert state.faults == merged


def test_error_and_drop_rates_are_seeded_fractions() -> None:
    state = FaultState(Faults(error_rate=0.3, drop_mid_stream=0.3), now_s=0.0, seed=7)
    errors = sum(state.inject_error() for _ in range(2000))
    drops = sum(state.drop_after() is not None for _ in range(2000))
    assert 450 < errors < 750 and 450 < drops < 750
    again = FaultState(Faults(error_rate=0.3), now_s=0.0, seed=7)
    first = FaultState(Faults(error_rate=0.3), now_s=0.0, seed=7)
    assert [again.inject_error() for _ in range(50)] == [first.inject_error() for _ in range(50)]


def test_no_faults_never_fire() -> None:
    state = FaultState(Faults(), now_s=0.0)
    assert not any(state.inject_error() for _ in range(100))
    assert all(state.drop_after() is None for _ in range(100))

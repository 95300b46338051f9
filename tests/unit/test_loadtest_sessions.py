"""The live replay's closed loop per session: a later turn waits for the previous one's end."""

from __future__ import annotations

import time

import gevent
import pytest

from gateway.offline.scenarios import SCENARIOS
from loadtests.plan import PlannedCall, calls
from loadtests.sessions import LiveSessionTurns

THINK_S = 0.05


def call(index: int, arrival_s: float, session: str | None, turn: int) -> PlannedCall:
    return PlannedCall(
        index=index, arrival_s=arrival_s, prompt_tokens=10, output_tokens=2, tenant="t",
        slo_class="c", session=session, turn=turn, think_s=THINK_S,
    )  # fmt: skip


def test_a_later_turn_arrives_think_s_after_the_previous_turn_ended() -> None:
    started = time.perf_counter()
    turns = LiveSessionTurns(lambda: time.perf_counter() - started)
    first, second, lone = call(0, 0.0, "s", 0), call(1, 0.01, "s", 1), call(2, 0.02, None, 0)
    assert turns.arrival_s(first) == 0.0 and turns.arrival_s(lone) == 0.02  # as planned
    waiting = gevent.spawn(turns.arrival_s, second)
    gevent.sleep(0.1)
    assert not waiting.ready()  # its previous turn has not ended
    turns.ended(first)
    ended_s = time.perf_counter() - started
    assert waiting.get(timeout=1) == pytest.approx(ended_s + THINK_S, abs=0.01)


def test_session_plans_carry_their_session_turn_and_think_time() -> None:
    planned = calls(SCENARIOS["sessions_fast"]().plan(1))
    turns = [c for c in planned if c.session is not None]
    assert turns and all(c.think_s == 3 for c in turns)
    by_session: dict[str, list[int]] = {}
    for c in sorted(turns, key=lambda c: c.arrival_s):
        by_session.setdefault(c.session or "", []).append(c.turn)
    assert all(t == list(range(len(t))) for t in by_session.values())  # turns in order, from 0
    assert any(c.session is None for c in planned)  # the batch traffic stays open loop

"""Closed loop per session for the live replay: a session's later turn arrives `think_s` after
its previous turn ended, as a person at a chat sends the next message after reading the answer.

Open loop elsewhere: a call that is no session's later turn arrives at its planned time. Used
inside the Locust process (gevent): `arrival_s` blocks the calling greenlet until the previous
turn has ended; a turn whose previous turn never ends waits until the run stops, and the runner
records it `unfinished` (loadtests/live.py). The offline simulator runs the same closed loop in
virtual time (gateway/offline/session_turns.py).
"""

from __future__ import annotations

from collections.abc import Callable

from gevent.event import AsyncResult

from loadtests.plan import PlannedCall


class LiveSessionTurns:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock  # seconds since the run started
        self._ended: dict[tuple[str, int], AsyncResult] = {}

    def arrival_s(self, call: PlannedCall) -> float:
        """When the call arrives: its planned time, or for a session's later turn `think_s`
        after the previous turn ended (waiting for that)."""
        if call.session is None or call.turn == 0:
            return call.arrival_s
        ended_s: float = self._turn(call.session, call.turn - 1).get()
        return ended_s + call.think_s

    def ended(self, call: PlannedCall) -> None:
        """The call's answer is over, whatever its outcome: its session's next turn may go."""
        if call.session is not None:
            self._turn(call.session, call.turn).set(self.clock())

    def _turn(self, session: str, turn: int) -> AsyncResult:
        return self._ended.setdefault((session, turn), AsyncResult())

"""Closed loop per session, offline, as the live replay does it (loadtests/sessions.py): a
session's later turn arrives `think_s` after its previous turn ended, whatever that turn's
outcome (served, failed, shed, timed out), as a person at a chat sends the next message after
reading the answer.

Every request that is no session's later turn arrives at its planned time. A later turn whose
previous turn never ends within the run is never sent, and neither is one whose arrival falls
after the run's end: it is recorded `unfinished` at its planned arrival, as live (the Locust
user waits for that end until the run stops; loadtests/live.py records what is missing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from gateway.offline.trace import PlannedRequest


class SessionTurns:
    """The plan as it is sent: which requests wait for their session's previous turn, and, when
    a turn ends, the next one with its arrival moment."""

    def __init__(self, plan: Sequence[PlannedRequest]) -> None:
        # a later turn's entry gets its arrival moment when its previous turn ends
        self.sent = list(plan)
        turns = {
            (session, getattr(r, "turn", 0)): index
            for index, r in enumerate(plan)
            if (session := getattr(r, "session", None)) is not None
        }
        self._waiting = {index for (_, turn), index in turns.items() if turn > 0}
        self._next = {
            turns[(session, turn - 1)]: index
            for (session, turn), index in turns.items()
            if turn > 0 and (session, turn - 1) in turns
        }

    def waits(self, index: int) -> bool:
        """Whether the request arrives only once its session's previous turn has ended."""
        return index in self._waiting

    def ended(self, index: int, now_s: float) -> tuple[int, PlannedRequest] | None:
        """The request ended at `now_s`: its session's next turn (index, and the request with
        its arrival, `think_s` later), if it has one."""
        following = self._next.get(index)
        if following is None:
            return None
        turn = self.sent[following]
        arrived = replace(turn, arrival_s=now_s + getattr(turn, "think_s", 0.0))
        self.sent[following] = arrived
        return following, arrived

"""The admission queue: waiting requests, earliest deadline first (policies/admission.py
decides who waits; gateway/core/admission_control.py holds the queue). Pure: no clock, no I/O."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar


def can_still_meet(now_s: float, deadline_s: float, predicted_ttft_s: float) -> bool:
    return now_s + predicted_ttft_s <= deadline_s


Item = TypeVar("Item")


@dataclass(frozen=True, slots=True)
class _Entry(Generic[Item]):
    deadline_s: float
    seq: int  # insertion order: equal deadlines stay first come, first served
    service_s: float
    item: Item


class DeadlineQueue(Generic[Item]):
    """Waiting requests, earliest deadline first, bounded; no clock, no I/O, no locks.

    Each item carries its deadline and its predicted service time (TTFT once dispatched), so
    `drop_expired` can reject it as soon as it can no longer meet the deadline, not at it.
    """

    def __init__(self, max_size: int) -> None:
        self.max_size = max_size
        self._entries: list[_Entry[Item]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def full(self) -> bool:
        return len(self._entries) >= self.max_size

    def push(self, item: Item, deadline_s: float, service_s: float = 0.0) -> bool:
        """Add an item; False (and not added) when the queue is full."""
        if self.full:
            return False
        self._seq += 1
        entry = _Entry(deadline_s, self._seq, service_s, item)
        bisect.insort(self._entries, entry, key=_order)
        return True

    def pop(self, now_s: float, fits: Callable[[Item], bool] | None = None) -> Item | None:
        """The earliest-deadline item that can still meet its deadline and `fits` (if given)."""
        for index, entry in enumerate(self._entries):
            alive = can_still_meet(now_s, entry.deadline_s, entry.service_s)
            if alive and (fits is None or fits(entry.item)):
                del self._entries[index]
                return entry.item
        return None

    def drop_expired(self, now_s: float) -> list[Item]:
        """Remove and return the items that can no longer meet their deadline."""
        kept: list[_Entry[Item]] = []
        dead: list[Item] = []
        for entry in self._entries:
            if can_still_meet(now_s, entry.deadline_s, entry.service_s):
                kept.append(entry)
            else:
                dead.append(entry.item)
        self._entries = kept
        return dead

    def remove(self, item: Item) -> bool:
        """Forget an item (its client went away); False when it was not queued."""
        for index, entry in enumerate(self._entries):
            if entry.item is item:
                del self._entries[index]
                return True
        return False

    def next_expiry_s(self) -> float | None:
        """When the next item becomes unreachable, for the caller's timer."""
        return min((e.deadline_s - e.service_s for e in self._entries), default=None)


def _order(entry: _Entry[Item]) -> tuple[float, int]:
    return entry.deadline_s, entry.seq

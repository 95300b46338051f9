"""The admission queue: waiting requests, earliest deadline first across classes and, within the
class whose turn it is, the least-served fairness key first (policies/fair_share.py).
policies/admission.py decides who waits; gateway/core/admission_control.py holds the queue.
Pure: no clock, no I/O."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, NamedTuple, TypeVar

Level = Callable[[str, str], float]  # (class, fairness key) -> its counter (fair_share.level)


def can_still_meet(now_s: float, deadline_s: float, predicted_ttft_s: float) -> bool:
    return now_s + predicted_ttft_s <= deadline_s


Item = TypeVar("Item")


@dataclass(slots=True)
class _Entry(Generic[Item]):
    deadline_s: float
    seq: int  # insertion order: equal deadlines stay first come, first served
    service_s: float
    item: Item
    group: str = ""  # its class: fairness orders within one
    key: str = ""  # its fairness key
    deferred: bool = False  # a later request of its class went first, by fairness


class Popped(NamedTuple, Generic[Item]):
    item: Item
    deferred: bool  # it waited for fairness: a later request of its class went first


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

    def push(
        self,
        item: Item,
        deadline_s: float,
        service_s: float = 0.0,
        *,
        group: str = "",
        key: str = "",
    ) -> bool:
        """Add an item of class `group` and fairness key `key`; False (and not added) when the
        queue is full."""
        if self.full:
            return False
        self._seq += 1
        entry = _Entry(deadline_s, self._seq, service_s, item, group, key)
        bisect.insort(self._entries, entry, key=_order)
        return True

    def pop(
        self,
        now_s: float,
        fits: Callable[[Item], bool] | None = None,
        level: Level | None = None,
    ) -> Popped[Item] | None:
        """The earliest-deadline item that can still meet its deadline and `fits` (if given);
        with `level`, of that item's class the one whose key has the least level (ties: by
        deadline), and the class's earlier items it went before are marked deferred."""
        for index, entry in enumerate(self._entries):
            alive = can_still_meet(now_s, entry.deadline_s, entry.service_s)
            if alive and (fits is None or fits(entry.item)):
                if level is not None:
                    return self._fairest(now_s, fits, level, entry)
                del self._entries[index]
                return Popped(entry.item, entry.deferred)
        return None

    def _fairest(
        self,
        now_s: float,
        fits: Callable[[Item], bool] | None,
        level: Level,
        head: _Entry[Item],
    ) -> Popped[Item]:
        """Of `head`'s class, the first alive and fitting entry by (level, deadline); `head`
        is one, so one is found. Each key's level is read once."""
        group, levels = head.group, {head.key: level(head.group, head.key)}
        mates = [e for e in self._entries if e.group == group]
        for entry in mates:
            if entry.key not in levels:
                levels[entry.key] = level(group, entry.key)
        for entry in sorted(mates, key=lambda e: (levels[e.key], e.deadline_s, e.seq)):
            alive = can_still_meet(now_s, entry.deadline_s, entry.service_s)
            if entry is head or (alive and (fits is None or fits(entry.item))):
                break
        for earlier in mates:
            if _order(earlier) < _order(entry) and earlier.key != entry.key:
                earlier.deferred = True
        del self._entries[next(i for i, e in enumerate(self._entries) if e is entry)]
        return Popped(entry.item, entry.deferred)

    def displace(
        self,
        group: str,
        key: str,
        level: Level,
        mate: Callable[[Item], bool] | None = None,
    ) -> Item | None:
        """Make room for a newcomer of class `group` and fairness key `key` in a full queue:
        remove and return the newest waiter (the one that waited least) of the most-served
        key of its class (among items `mate` keeps), when that key is served more than the
        newcomer's; else None. A full queue refused whoever came last, so a burst that filled
        it refused a quiet tenant's every request; now it refuses the burst's own."""
        mates = [
            e
            for e in self._entries
            if e.group == group and e.key != key and (mate is None or mate(e.item))
        ]
        levels: dict[str, float] = {}
        for entry in mates:
            if entry.key not in levels:
                levels[entry.key] = level(group, entry.key)
        own = level(group, key)
        above = [e for e in mates if levels[e.key] > own]
        if not above:
            return None
        victim = max(above, key=lambda e: (levels[e.key], e.seq))
        del self._entries[next(i for i, e in enumerate(self._entries) if e is victim)]
        return victim.item

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

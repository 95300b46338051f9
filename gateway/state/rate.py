"""Sliding rate windows as slot counters, the same in both stores.

A window of `window_s` is cut into RATE_SLOTS slots of `window_s / RATE_SLOTS`; a hit adds its
cost to the current slot, and the window's total is the sum of the last RATE_SLOTS slots. The
total therefore covers between 0.9 and 1.0 x window_s of history (the oldest slot is partly
outside the window), and each key holds at most RATE_SLOTS + 1 counters whatever the traffic.
Slot numbers derive from `now` only, so every replica (and both stores) agree on them.
"""

from __future__ import annotations

import math

RATE_SLOTS = 10


def slot_range(now: float, window_s: float) -> tuple[int, int]:
    """(current slot, oldest slot still inside the window)."""
    current = math.floor(now * RATE_SLOTS / window_s)
    return current, current - RATE_SLOTS + 1


def slot_ttl_s(window_s: float) -> float:
    """How long a window key must live after its last hit."""
    return window_s * (RATE_SLOTS + 1) / RATE_SLOTS

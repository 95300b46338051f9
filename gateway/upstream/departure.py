"""Noticing a client that leaves while the gateway waits on its behalf.

A client that disconnects must cancel what the gateway is doing for it (an upstream attempt
waiting for its first byte, a stream being relayed), so the upstream stops working for nobody.
Noticing needs a task waiting on the ASGI `receive` for `http.disconnect`. Most requests are
over within milliseconds, so that task is started only after a short grace period: a request
that ends first never creates one, and one that runs longer is watched from then on (a client
that left during the grace period is noticed at once, as the disconnect waits in `receive`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

GRACE_S = 0.05


class Departure:
    """Cancels the current task if the client leaves; use as a context manager around the
    work, and check `left` after catching CancelledError."""

    def __init__(self, disconnected: Callable[[], Awaitable[Any]], grace_s: float = GRACE_S):
        self._disconnected = disconnected
        self._grace_s = grace_s
        self._task: asyncio.Task[Any] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._watcher: asyncio.Future[Any] | None = None
        self.left = False

    def __enter__(self) -> Departure:
        self._task = asyncio.current_task()
        self._timer = asyncio.get_running_loop().call_later(self._grace_s, self._watch)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._task = None  # from here on, a departure cancels nothing
        if self._timer is not None:
            self._timer.cancel()
        if self._watcher is not None:
            self._watcher.cancel()

    def _watch(self) -> None:
        self._watcher = asyncio.ensure_future(self._disconnected())
        self._watcher.add_done_callback(self._leave)

    def _leave(self, watcher: asyncio.Future[Any]) -> None:
        if self._task is not None and not watcher.cancelled():
            self.left = True
            self._task.cancel()

    def forgive(self) -> None:
        """After catching the CancelledError a departure caused: the task goes on normally."""
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()

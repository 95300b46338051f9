"""Fire-and-forget work off the request path (stats updates, lease releases), still owned:
tasks are tracked so shutdown can wait for them and failures are logged, never lost silently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from gateway.telemetry.metrics import log

T = TypeVar("T")
# What the synchronous cores hand store writes to: `Background.spawn` live; offline, a runner
# that finishes them at once (the memory store never suspends).
Spawn = Callable[[Coroutine[Any, Any, Any]], object]


class Suspended(RuntimeError):
    """A coroutine expected to finish at once (over a store that never suspends) suspended."""


def run_to_completion(coroutine: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine that finishes without suspending, run in the caller (no event
    loop needed: the offline simulator runs the live code this way in virtual time)."""
    try:
        coroutine.send(None)
    except StopIteration as finished:
        result: T = finished.value
        return result
    coroutine.close()
    raise Suspended(f"{coroutine!r} suspended; it was expected to finish at once")


def run_now(coroutine: Coroutine[Any, Any, Any]) -> None:
    """Run, in the caller, a write known to finish without suspending (`state.writes_at_once`):
    a task per write cost more than most writes themselves (creating it, scheduling its step,
    its done callback). A failure, or a write that suspends after all (a bug), is logged, never
    raised into the request that made the write."""
    try:
        run_to_completion(coroutine)
    except Suspended:
        log.error("a write expected to finish at once suspended and was dropped: %r", coroutine)
    except Exception as exc:
        log.warning("write failed: %r", exc)


class Background:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("background task failed: %r", task.exception())

    async def drain(self, timeout_s: float = 5.0) -> None:
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout_s)

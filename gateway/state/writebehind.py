"""Write-behind for the shared store: lease takes and drops, observations and settlements
(gateway/state/usage.py), batched.

Every request takes a lease, drops it and records an observation. Sent one call each, that was
three round trips and three pooled connections per request; under load those calls queued for
connections behind each other, and the deciding reads (and the health PING) queued behind
them. Here they wait in a list and one long-lived task sends whatever gathered in the last few
milliseconds as one pipeline, in submission order, so a lease's drop always follows its take.
A batch that fails is handed back (`on_failed`) to be served locally and replayed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from redis import exceptions as redis_errors

from gateway.state.redis_calls import announce
from gateway.state.redis_store import FAILURES, RedisStatsStore, Write
from gateway.telemetry.metrics import log

# A write that failed to reach a master, as opposed to one a master refused.
UNSENT = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.ClusterDownError,
    redis_errors.TryAgainError,
    redis_errors.MovedError,
    redis_errors.AskError,
    OSError,
    TimeoutError,
)
FLUSH_S = 0.002  # how long a batch gathers: a fraction of a request's time, many requests' writes
Failed = Callable[[list[Write], BaseException], Awaitable[None]]


class WriteBehind:
    def __init__(
        self,
        store: RedisStatsStore,
        on_failed: Failed,
        *,
        timeout_s: float,
        flush_s: float = FLUSH_S,
    ) -> None:
        self.store = store
        self.on_failed = on_failed
        self.timeout_s = timeout_s
        self.flush_s = flush_s
        self._queue: list[Write] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def submit(self, write: Write) -> None:
        """Queued at once; the flusher starts with the first write (the loop is running then)."""
        self._queue.append(write)
        if len(self._queue) == 1:
            self._wake.set()
            if self._task is None:
                self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while not self._closing:
            await self._wake.wait()
            self._wake.clear()
            if not self._closing:
                await asyncio.sleep(self.flush_s)  # let a batch gather
            try:
                await self.flush()
            except Exception as exc:  # a bug must not stop every later write
                log.warning("write-behind flush failed: %r", exc)

    async def flush(self) -> None:
        batch, self._queue = self._queue, []
        if not batch:
            return
        try:
            async with asyncio.timeout(self.timeout_s):
                replies = await self.store.write_batch(batch)
        except FAILURES as exc:
            # Unknown which writes landed: each is idempotent on Redis (a lease is a sorted-set
            # member) except an observation, which is then kept locally only.
            await self.on_failed(batch, exc)
            return
        for write, reply in zip(batch, replies, strict=False):
            if write.alerted is not None and not isinstance(reply, Exception):
                announce(reply, write.alerted)
        # On a cluster one node's writes can fail alone (a master down, its slot moving): those
        # are served locally like a failed batch; a write a master refused (any other error)
        # was wrong, not lost, and is only reported.
        lost = [w for w, reply in zip(batch, replies, strict=True) if _lost(reply)]
        if lost:
            await self.on_failed(lost, next(r for r in replies if _lost(r)))
        refused = [r for r in replies if isinstance(r, Exception) and not _lost(r)]
        if refused:
            log.warning(
                "shared store refused %d of %d writes: %r", len(refused), len(batch), refused[0]
            )

    async def close(self) -> None:
        """Flush what is queued, then stop the flusher. It is told to stop, not cancelled: a
        flush cut short could not tell which of its writes landed, and redis-py does not always
        let a cancellation through a pipeline (seen: `execute` returned, the task went on), so
        awaiting a cancelled flusher could wait forever. Its last flush is bounded by the
        timeout like any other."""
        self._closing = True
        self._wake.set()
        if self._task is not None:
            await self._task
        await self.flush()


def _lost(reply: object) -> bool:
    return isinstance(reply, UNSENT)

"""Runtime shutdown: its task stop and its closes stay bounded even when a job swallows its
cancellation or a close never returns."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from gateway.server import runtime
from gateway.server.runtime import SHUTDOWN_S, closed, stop_tasks
from gateway.server.workers import KILL_GRACE_S
from tests.fixtures.servers import STOP_TIMEOUT_S


async def _stubborn(swallow: int, stopped: list[str]) -> None:
    """Loops on after its first `swallow` cancellations, as a job whose cancellation a client
    library ate would."""
    while True:
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            if swallow == 0:
                stopped.append("stopped")
                raise
            swallow -= 1


async def test_a_task_that_swallows_one_cancellation_is_cancelled_again() -> None:
    stopped: list[str] = []
    task = asyncio.create_task(_stubborn(1, stopped))
    await asyncio.sleep(0.02)
    await asyncio.wait_for(stop_tasks([task], rounds=3, round_s=0.1), timeout=2)
    assert task.cancelled() and stopped == ["stopped"]


async def test_a_task_that_never_stops_is_left_behind_and_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stopped: list[str] = []
    task = asyncio.create_task(_stubborn(2, stopped), name="stubborn-job")
    await asyncio.wait_for(stop_tasks([task], rounds=2, round_s=0.05), timeout=2)
    assert not task.done() and "stubborn-job" in caplog.text
    task.cancel()  # its third cancellation stops it, so the test's loop closes
    await asyncio.gather(task, return_exceptions=True)
    assert stopped == ["stopped"]


async def test_a_job_that_failed_before_shutdown_stops_at_once_its_failure_retrieved() -> None:
    """As gather(return_exceptions=True) did: no "exception was never retrieved" report when
    the task is collected."""
    reports: list[dict[str, object]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, context: reports.append(context))

    async def fails() -> None:
        raise RuntimeError("boom")

    failed = asyncio.create_task(fails())
    await asyncio.sleep(0)
    await asyncio.wait_for(stop_tasks([failed], rounds=1, round_s=5.0), timeout=1)
    del failed
    gc.collect()
    assert reports == []


async def test_a_close_that_never_returns_is_given_up_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    never = asyncio.get_running_loop().create_future()

    async def hanging_close() -> None:
        await never

    await asyncio.wait_for(closed("state store", hanging_close(), timeout_s=0.05), timeout=2)
    assert "closing the state store took over" in caplog.text


async def test_a_close_that_returns_is_awaited_to_its_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    done: list[str] = []

    async def quick_close() -> None:
        await asyncio.sleep(0.01)
        done.append("closed")

    await closed("upstream connections", quick_close(), timeout_s=1.0)
    assert done == ["closed"] and "took over" not in caplog.text


async def test_a_close_that_ignores_its_cancellation_is_left_behind_in_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`asyncio.wait_for` would wait for the cancelled close to end, here forever."""
    release = asyncio.Event()

    async def stubborn_close() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue  # a cleanup that catches its cancellation and waits on

    await asyncio.wait_for(closed("state store", stubborn_close(), timeout_s=0.05), timeout=2)
    assert "closing the state store took over" in caplog.text
    release.set()  # so the test's loop can close


def test_the_whole_shutdown_fits_in_what_a_supervisor_waits() -> None:
    """The lifespan's close, once streams are drained: within what the workers supervisor
    waits past the drain, and (after the test servers' 2 s of grace for open connections)
    within the 10 s that the test servers wait for a stop."""
    assert SHUTDOWN_S < KILL_GRACE_S
    assert 2.0 + SHUTDOWN_S < STOP_TIMEOUT_S


async def test_a_background_job_that_fails_is_logged_and_run_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(runtime, "RESTART_AFTER_S", 0.0)
    runs: list[int] = []

    async def refresh() -> None:
        runs.append(len(runs))
        if len(runs) < 3:
            raise KeyError("a reply misread")

    with caplog.at_level(logging.ERROR):
        await asyncio.wait_for(runtime.kept_running(refresh), 1.0)
    assert runs == [0, 1, 2]  # failed twice, then ran to its end
    failed = [r for r in caplog.records if "background job" in r.getMessage()]
    assert len(failed) == 2 and "refresh" in failed[0].getMessage()
    assert failed[0].exc_info is not None  # the traceback is logged


async def test_a_cancelled_background_job_is_not_run_again() -> None:
    runs: list[int] = []

    async def forever() -> None:
        runs.append(1)
        await asyncio.sleep(3600)

    task = asyncio.create_task(runtime.kept_running(forever))
    await asyncio.sleep(0.01)
    await stop_tasks([task])
    assert task.cancelled() and runs == [1]

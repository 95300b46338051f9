"""The simulated servers' streamed answer: SSE events sent as plain ASGI messages while the
client is there, and a way to cut the connection mid-stream (fault injection)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Coroutine
from contextlib import aclosing
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send


class StreamCut(Exception):
    """Raised inside a stream to cut the connection without a clean end (fault injection)."""


async def wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(work: Coroutine[Any, Any, None], receive: Receive) -> bool:
    """Run work until it ends or the client leaves; False (work cancelled) if the client left."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(wait_disconnect(receive))
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        task.cancel()
        watch.cancel()
        await asyncio.gather(task, watch, return_exceptions=True)
    if task.cancelled():
        return False
    task.result()  # re-raises what the work raised
    return True


class SseResponse(Response):
    media_type = "text/event-stream"

    def __init__(
        self,
        events: AsyncGenerator[bytes, None],
        *,
        headers: dict[str, str],
        on_close: Callable[[], None],
    ) -> None:
        self.status_code = 200
        self.background = None
        self.init_headers(headers)
        self._events = events
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await unless_disconnected(self._send_all(send), receive)
        except StreamCut:
            return  # uvicorn closes the connection of a response left unfinished
        finally:
            self._on_close()

    async def _send_all(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        async with aclosing(self._events) as events:
            async for event in events:
                await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

"""A TCP proxy on loopback that delays every byte by `delay_s`, in both directions.

Bytes keep their order and are delivered `delay_s` after they arrived (latency, not a
bandwidth cap); bytes a side sent before closing still arrive, as on a real network. The delay
can change at any time; it applies to bytes that arrive after the change.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator

READ_SIZE = 65536


class LatencyProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.delay_s = 0.0
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._serve(),))

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self._started.set()
        async with server:
            await self._stop.wait()
            for writer in self._writers:  # the pumps then end on their own
                writer.close()
            await asyncio.gather(*self._connections, return_exceptions=True)

    async def _connection(
        self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            client_w.close()
            self._connections.discard(task)
            return
        self._writers |= {client_w, server_w}
        try:
            # A reset on either side simply ends the connection, as it would on a network.
            with contextlib.suppress(OSError):
                await asyncio.gather(self._pump(client_r, server_w), self._pump(server_r, client_w))
        finally:
            client_w.close()
            server_w.close()
            self._writers -= {client_w, server_w}
            self._connections.discard(task)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        due: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        delivering = asyncio.create_task(self._deliver(due, writer))
        try:
            with contextlib.suppress(OSError):  # a reset ends the stream like a close
                while data := await reader.read(READ_SIZE):
                    due.put_nowait((time.monotonic() + self.delay_s, data))
        except asyncio.CancelledError:
            delivering.cancel()
            raise
        due.put_nowait((time.monotonic() + self.delay_s, b""))
        await delivering

    async def _deliver(
        self, due: asyncio.Queue[tuple[float, bytes]], writer: asyncio.StreamWriter
    ) -> None:
        try:
            while True:
                at_s, data = await due.get()
                await asyncio.sleep(max(0.0, at_s - time.monotonic()))
                if not data:
                    return
                writer.write(data)
                await writer.drain()
        except OSError:
            return
        finally:
            writer.close()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def __enter__(self) -> LatencyProxy:
        self._thread.start()
        if not self._started.wait(5):
            raise RuntimeError("the latency proxy did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(5)
        with contextlib.suppress(RuntimeError):
            self._loop.close()


@contextlib.contextmanager
def delayed(proxy: LatencyProxy, delay_s: float) -> Iterator[None]:
    proxy.delay_s = delay_s
    try:
        yield
    finally:
        proxy.delay_s = 0.0

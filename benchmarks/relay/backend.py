"""The zero-delay mock endpoint every system in the benchmark sits in front of.

OpenAI-shaped answers with no model behind them: a canned chat completion, or an SSE stream of
`tokens` content events (each a distinct `TOKEN` string, so a client can count them whatever
the relay does to the framing) ending with usage and `data: [DONE]`. It is a bare asyncio
protocol with httptools' parser on uvloop, so it costs far less per request than any relay
under test and never becomes the bottleneck on the core it shares with the load generator.

`events_per_write` sets how a stream is flushed: 0 writes the whole stream at once; N writes N
events, then yields to the event loop, as a server that flushes per token does (the relay then
sees many small reads instead of one).

Run: python -m benchmarks.relay.backend --port 9000 --tokens 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from typing import cast

import httptools
import uvloop

TOKEN = "tk7"  # appears once per content event and nowhere else
# Names every part of the benchmark agrees on (kept here: this module imports nothing heavy).
UPSTREAM_MODEL = "bench-upstream"  # what the mock endpoint is asked for
PUBLIC_MODEL = "bench-model"  # what clients ask the relays for
TENANT_KEY = "sk-bench-tenant"  # the gateway's tenant key and LiteLLM's master key
KEY_PREFIX = "sg:bench:"  # the gateway's Redis keys, should the server be shared
_STREAM = re.compile(rb'"stream"\s*:\s*true')
_SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
)
_NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"


def _json_response(body: dict[str, object]) -> bytes:
    raw = json.dumps(body, separators=(",", ":")).encode()
    head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(raw)}\r\n"
    return head.encode() + b"\r\n" + raw


def completion_response(tokens: int) -> bytes:
    usage = {"prompt_tokens": 12, "completion_tokens": tokens, "total_tokens": tokens + 12}
    return _json_response(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 0,
            "model": UPSTREAM_MODEL,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": " ".join([TOKEN] * tokens)},
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
        }
    )


def _event(delta: dict[str, str], finish: str | None = None, **extra: object) -> bytes:
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": UPSTREAM_MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def stream_frames(tokens: int) -> list[bytes]:
    """The chunked-encoding frames of one stream, one SSE event per frame, terminator last."""
    usage = {"prompt_tokens": 12, "completion_tokens": tokens, "total_tokens": tokens + 12}
    events = [_event({"role": "assistant", "content": ""})]
    events += [_event({"content": TOKEN + " "}) for _ in range(tokens)]
    events.append(_event({}, "stop", usage=usage))
    events.append(b"data: [DONE]\n\n")
    return [_chunk(event) for event in events] + [b"0\r\n\r\n"]


class Canned:
    """The bytes every response is made of, built once."""

    def __init__(self, tokens: int, events_per_write: int) -> None:
        self.completion = completion_response(tokens)
        frames = stream_frames(tokens)
        size = events_per_write or len(frames)
        self.stream_writes = [b"".join(frames[i : i + size]) for i in range(0, len(frames), size)]
        self.small = _json_response({"object": "list", "data": [{"id": UPSTREAM_MODEL}]})


class MockProtocol(asyncio.Protocol):
    """One client connection: parse requests, answer each from the canned bytes."""

    def __init__(self, canned: Canned) -> None:
        self.canned = canned
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body = bytearray()
        self.streaming: asyncio.Future[None] | None = None  # the stream being written, if any

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._close()

    def on_message_begin(self) -> None:
        self.url = b""
        self.body = bytearray()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        method = self.parser.get_method()
        if method == b"POST" and self.url.endswith(b"/completions"):
            if _STREAM.search(self.body):
                keep_alive = self.parser.should_keep_alive()
                self.streaming = asyncio.ensure_future(self._stream(transport, keep_alive))
                return
            transport.write(self.canned.completion)
        elif method == b"GET":
            transport.write(self.canned.small)
        else:
            transport.write(_NOT_FOUND)
        if not self.parser.should_keep_alive():
            self._close()

    async def _stream(self, transport: asyncio.Transport, keep_alive: bool) -> None:
        transport.write(_SSE_HEAD)
        for data in self.canned.stream_writes:
            if transport.is_closing():
                return
            transport.write(data)
            if len(self.canned.stream_writes) > 1:
                await asyncio.sleep(0)
        if not keep_alive:
            transport.close()

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def serve(host: str, port: int, canned: Canned) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: MockProtocol(canned), host, port, backlog=1024)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--events-per-write", type=int, default=1)
    args = parser.parse_args()
    uvloop.run(serve(args.host, args.port, Canned(args.tokens, args.events_per_write)))


if __name__ == "__main__":
    main()

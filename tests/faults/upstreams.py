"""A scripted OpenAI-compatible upstream that records every request it receives.

The answer is a plain function of what arrived (status, headers, body), set per test, so a test
can make an upstream misbehave in ways the simulators do not: 429 storms with Retry-After,
redirects, cookies, hop-by-hop and oversized headers, bodies that echo what they were sent, and
streams sent in pieces (`Answer.chunks`) that may break off mid-line (`Answer.cut`).

`echo_secrets` is the careless upstream of the security tests: it reflects the credentials it
was sent, and the prompt, into its errors, non-streamed (a 400) and streamed (an error event
split across reads), and cuts streams mid-line, depending on the prompt (`ECHO_MODES`).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from tests.fixtures.servers import UvicornThread

OK_BODY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
}


@dataclass(frozen=True, slots=True)
class Seen:
    at_s: float  # time.monotonic() on arrival
    method: str
    path: str
    headers: list[tuple[str, str]]
    body: bytes


@dataclass
class Answer:
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = json.dumps(OK_BODY).encode()
    chunks: Sequence[bytes] = ()  # when set: a stream, one write per chunk, instead of `body`
    cut: bool = False  # the stream breaks off after its chunks (no end of the chunked body)
    gap_s: float = 0.05  # between chunks, so that each is a read of its own


class Streamed(Response):
    """`Answer.chunks` as a text/event-stream, flushed one by one; with `cut`, the app returns
    without finishing the body, so uvicorn closes the connection mid-stream."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(status_code=answer.status, media_type="text/event-stream")
        self.raw_headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]
        self.answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = {"type": "http.response.start", "status": self.status_code}
        await send(start | {"headers": self.raw_headers})
        for chunk in self.answer.chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await asyncio.sleep(self.answer.gap_s)
        if not self.answer.cut:
            await send({"type": "http.response.body", "body": b"", "more_body": False})


class ScriptedUpstream:
    """Answers every request with `answer(seen)`; `seen` lists what arrived, in order."""

    def __init__(self, answer: Callable[[Seen], Answer] = lambda seen: Answer()) -> None:
        self.answer = answer
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        paths = ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/models"]
        routes = [Route(p, self._handle, methods=["GET", "POST"]) for p in paths]
        routes += [Route("/{rest:path}", self._handle, methods=["GET", "POST"])]
        self.app = Starlette(routes=routes)

    async def _handle(self, request: Request) -> Response:
        seen = Seen(
            time.monotonic(),
            request.method,
            request.url.path,
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw],
            await request.body(),
        )
        with self._lock:
            self.seen.append(seen)
        answer = self.answer(seen)
        response = (
            Streamed(answer)
            if answer.chunks
            else Response(answer.body, status_code=answer.status, media_type="application/json")
        )
        for name, value in answer.headers:
            response.raw_headers.append((name.encode("latin-1"), value.encode("latin-1")))
        return response

    def completions(self) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.path.endswith("/completions")]


@contextmanager
def serving(upstream: ScriptedUpstream) -> Iterator[str]:
    """Serve it on loopback; yields its root URL (no /v1)."""
    with UvicornThread(upstream.app) as server:
        yield server.base_url


# The prompt word that picks what `echo_secrets` does with a chat completion.
ECHO_MODES = ("echo-body", "echo-stream", "cut-mid-line", "cut-in-key")
CONTENT = b'data: {"choices": [{"index": 0, "delta": {"content": "abc"}}]}\n\n'


def echo_secrets(seen: Seen) -> Answer:
    """Every completion's error repeats the request's Authorization header and prompt."""
    if seen.method == "GET":
        return Answer()  # health probes and model lists are fine
    prompt = json.loads(seen.body)["messages"][0]["content"]
    sent = " ".join(v for k, v in seen.headers if k.lower() == "authorization")
    message = f"key {sent} exhausted; you said {prompt}"
    error = json.dumps({"error": {"message": message, "type": "x", "param": None, "code": None}})
    event = b"data: " + error.encode() + b"\n\n"
    middle = event.index(b"exhausted") - 6  # inside the key, when one was sent
    if "echo-stream" in prompt:
        return Answer(chunks=[CONTENT, event[:middle], event[middle:]])
    if "cut-mid-line" in prompt:
        return Answer(chunks=[CONTENT, CONTENT[:40]], cut=True)
    if "cut-in-key" in prompt:
        return Answer(chunks=[CONTENT, event[:middle]], cut=True)
    return Answer(400, [("x-echo", sent)], error.encode())

"""A scripted OpenAI-compatible upstream that records every request it receives.

The answer is a plain function of nothing (status, headers, body), set per test, so a test can
make an upstream misbehave in ways the simulators do not: 429 storms with Retry-After, redirects,
cookies, hop-by-hop and oversized headers, bodies that echo what they were sent.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

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
        response = Response(answer.body, status_code=answer.status, media_type="application/json")
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

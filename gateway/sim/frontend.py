"""The OpenAI-compatible HTTP surface shared by the simulated engine and provider.

A `Frontend` answers the OpenAI routes and the simulator's own `/sim/faults` and `/sim/stats`,
and asks a `TokenSource` (the engine model loop, or the provider's latency draws) for output
tokens. It applies faults in a fixed order before any work: auth (401), `status_code`
override, `insufficient_quota` (429), `error_rate` (500), `hang`, unknown model (404), bad body
(400), then the source's own refusal (context too long, concurrency limit). Client disconnects
are watched for the whole request, so a gone client always frees its sequence.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncGenerator, Callable, Coroutine
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive

from gateway.sim.faults import FaultState
from gateway.sim.stream_response import SseResponse, StreamCut, unless_disconnected, wait_disconnect
from gateway.sim.wire import (
    CompletionRequest,
    CompletionWriter,
    DetailsMode,
    InvalidBody,
    Kind,
    PromptDetails,
    embeddings_body,
    error_body,
    models_body,
    parse_completion,
)

Outcome = Literal["completed", "cancelled", "dropped"]
HINT_FIELDS = ("priority", "service_tier")  # recorded per request, for the gateway's tests
_CLIENT_GONE = 499  # nobody reads it; nginx's code for "client closed request"


class Writer(Protocol):
    """Builds one answer in an API's wire format (wire.py, responses_wire.py, messages_wire.py):
    the opening events (before any token), one token's events, the closing events, the body."""

    tokens_sent: int
    details: PromptDetails  # what serving learns about the prompt (cached tokens)

    def start(self) -> bytes: ...

    def chunk(self, index: int) -> bytes: ...

    def end(self) -> bytes: ...

    def body(self) -> dict[str, Any]: ...


Parse = Callable[[Any], tuple[CompletionRequest, Writer]]  # raises InvalidBody


class TokenSource(Protocol):
    owned_by: str
    max_model_len: int | None  # what /v1/models says of the context window (None: nothing)

    def refuse(self, request: CompletionRequest, in_progress: int) -> Response | None: ...

    def headers(self, in_progress: int) -> dict[str, str]: ...

    def tokens(
        self, request: CompletionRequest, details: PromptDetails
    ) -> AsyncGenerator[int, None]: ...

    def stats(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class FrontendOptions:
    model: str
    api_key: str | None = None
    strict_model: bool = True
    default_max_tokens: int = 64
    separate_finish: bool = False
    details_mode: DetailsMode = "off"


@dataclass(slots=True)
class SimStats:
    requests_received: int = 0
    in_progress: int = 0
    errors_injected: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    last_model: str | None = None
    authorization_present: bool = False
    # the scheduling fields of the last request, as they arrived (absent: not sent)
    last_hints: dict[str, Any] = field(default_factory=dict)

    def begin(self) -> CountedRequest:
        self.in_progress += 1
        return CountedRequest(self)

    def count(self, outcome: Outcome) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def to_json(self) -> dict[str, Any]:
        return {
            "requests_received": self.requests_received,
            "in_progress": self.in_progress,
            "completed": self.outcomes.get("completed", 0),
            "cancelled": self.outcomes.get("cancelled", 0),
            "dropped": self.outcomes.get("dropped", 0),
            "errors_injected": self.errors_injected,
            "last_model": self.last_model,
            "authorization_present": self.authorization_present,
            "last_hints": self.last_hints,
        }


@dataclass(slots=True)
class CountedRequest:
    """One admitted request as `SimStats` counts it; `close` ends it exactly once with its
    outcome."""

    stats: SimStats
    outcome: Outcome = "cancelled"
    closed: bool = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.stats.in_progress -= 1
            self.stats.count(self.outcome)


class _Refusal(Exception):
    def __init__(self, response: Response) -> None:
        super().__init__(response.status_code)
        self.response = response


def error_response(
    status: int, message: str, error_type: str, *, code: str | None = None, **headers: str
) -> JSONResponse:
    return JSONResponse(error_body(message, error_type, code=code), status, headers=headers)


class Frontend:
    def __init__(
        self,
        options: FrontendOptions,
        source: TokenSource,
        faults: FaultState,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options
        self.source = source
        self.faults = faults
        self.clock = clock
        self.stats = SimStats()

    def routes(self) -> list[Route]:
        return [
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/embeddings", self.embeddings, methods=["POST"]),
            Route("/v1/models", self.models, methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/sim/faults", self.get_faults, methods=["GET"]),
            Route("/sim/faults", self.set_faults, methods=["POST"]),
            Route("/sim/stats", self.get_stats, methods=["GET"]),
        ]

    async def chat(self, request: Request) -> Response:
        return await self._answer(self._completion(request, "chat"))

    async def completions(self, request: Request) -> Response:
        return await self._answer(self._completion(request, "completion"))

    async def embeddings(self, request: Request) -> Response:
        return await self._answer(self._embeddings(request))

    async def models(self, request: Request) -> Response:
        try:
            self._check_auth(request)
        except _Refusal as refusal:
            return refusal.response
        source = self.source
        return JSONResponse(models_body(self.options.model, source.owned_by, source.max_model_len))

    async def health(self, request: Request) -> Response:
        status = self.faults.faults.status_code or 200
        return Response(status_code=status)

    async def get_faults(self, request: Request) -> Response:
        return JSONResponse(self.faults.faults.model_dump())

    async def set_faults(self, request: Request) -> Response:
        try:
            patch = await request.json()
            faults = self.faults.update(patch, now_s=self.clock())
        except (json.JSONDecodeError, TypeError, ValidationError) as exc:
            return error_response(400, f"invalid faults: {exc}", "invalid_request_error")
        return JSONResponse(faults.model_dump())

    async def get_stats(self, request: Request) -> Response:
        return JSONResponse(self.stats.to_json() | self.source.stats())

    async def _answer(self, work: Coroutine[Any, Any, Response]) -> Response:
        try:
            return await work
        except _Refusal as refusal:
            return refusal.response

    async def _completion(self, request: Request, kind: Kind) -> Response:
        def parse(body: Any) -> tuple[CompletionRequest, Writer]:
            parsed = parse_completion(
                body, kind, default_max_tokens=self.options.default_max_tokens
            )
            return parsed, self._writer(parsed)

        return await self.serve(request, parse)

    async def serve(self, request: Request, parse: Parse) -> Response:
        """Admit (faults first), parse, then stream or answer whole: every API's route."""
        body = await self._admit(request)
        try:
            parsed, writer = parse(body)
        except InvalidBody as exc:
            return error_response(400, str(exc), "invalid_request_error")
        refusal = self.source.refuse(parsed, self.stats.in_progress)
        if refusal is not None:
            return refusal
        if parsed.stream:
            return self._stream(parsed, writer)
        return await self._whole(parsed, writer, request.receive)

    async def answer(self, work: Coroutine[Any, Any, Response]) -> Response:
        """The work's response, or the refusal it raised."""
        return await self._answer(work)

    def unauthorized(self, request: Request) -> Response | None:
        """The 401 for a request without the server's key, else None."""
        try:
            self._check_auth(request)
        except _Refusal as refusal:
            return refusal.response
        return None

    async def _embeddings(self, request: Request) -> Response:
        body = await self._admit(request)
        try:
            return JSONResponse(embeddings_body(body))
        except InvalidBody as exc:
            return error_response(400, str(exc), "invalid_request_error")

    async def _admit(self, request: Request) -> Any:
        """Read the body and apply auth, faults and the model check; raises _Refusal."""
        try:
            body = await request.json()
        except json.JSONDecodeError:
            invalid = error_response(400, "invalid JSON body", "invalid_request_error")
            raise _Refusal(invalid) from None
        self._record(request, body)
        self._check_auth(request)
        self._check_faults()
        held = await self.held(request)
        if held is not None:
            raise _Refusal(held)
        self._check_model(body)
        return body

    async def held(self, request: Request) -> Response | None:
        """With the `hang` fault: wait until the client leaves, then the answer nobody reads;
        None without it."""
        if not self.faults.faults.hang:
            return None
        await wait_disconnect(request.receive)
        self.stats.count("cancelled")
        return Response(status_code=_CLIENT_GONE)

    def _record(self, request: Request, body: Any) -> None:
        self.stats.requests_received += 1
        self.stats.authorization_present = "authorization" in request.headers
        model = body.get("model") if isinstance(body, dict) else None
        self.stats.last_model = model if isinstance(model, str) else None
        fields = body if isinstance(body, dict) else {}
        self.stats.last_hints = {k: fields[k] for k in HINT_FIELDS if k in fields}

    def _check_auth(self, request: Request) -> None:
        key = self.options.api_key
        headers = request.headers
        if key is None or headers.get("x-api-key") == key:  # Anthropic's header, or Bearer
            return
        if headers.get("authorization") != f"Bearer {key}":
            raise _Refusal(
                error_response(
                    401,
                    "Incorrect API key provided.",
                    "invalid_request_error",
                    code="invalid_api_key",
                )
            )

    def _check_faults(self) -> None:
        faults = self.faults.faults
        if faults.status_code is not None:
            response = error_response(faults.status_code, "simulated failure", "server_error")
        elif faults.insufficient_quota:
            response = error_response(
                429,
                "You exceeded your current quota, please check your plan and billing details.",
                "insufficient_quota",
                code="insufficient_quota",
            )
        elif self.faults.inject_error():
            response = error_response(500, "simulated internal error", "server_error")
        else:
            return
        self.stats.errors_injected += 1
        raise _Refusal(response)

    def _check_model(self, body: Any) -> None:
        model = body.get("model") if isinstance(body, dict) else None
        if self.options.strict_model and model != self.options.model:
            raise _Refusal(
                error_response(
                    404,
                    f"The model `{model}` does not exist.",
                    "invalid_request_error",
                    code="model_not_found",
                )
            )

    def _writer(self, parsed: CompletionRequest) -> CompletionWriter:
        options = self.options
        return CompletionWriter(
            parsed, separate_finish=options.separate_finish, details_mode=options.details_mode
        )

    def _stream(self, parsed: CompletionRequest, writer: Writer) -> Response:
        flight = self.stats.begin()
        headers = self.source.headers(self.stats.in_progress)
        events = self._events(parsed, writer, self.faults.drop_after(), flight)
        return SseResponse(events, headers=headers, on_close=flight.close)

    async def _events(
        self,
        parsed: CompletionRequest,
        writer: Writer,
        drop_after: int | None,
        flight: CountedRequest,
    ) -> AsyncGenerator[bytes, None]:
        opening = writer.start()
        if opening:
            yield opening
        async with aclosing(self.source.tokens(parsed, writer.details)) as tokens:
            async for index in tokens:
                if index == drop_after:
                    flight.outcome = "dropped"
                    raise StreamCut
                yield writer.chunk(index)
        flight.outcome = "completed"
        yield writer.end()

    async def _whole(self, parsed: CompletionRequest, writer: Writer, receive: Receive) -> Response:
        flight = self.stats.begin()
        headers = self.source.headers(self.stats.in_progress)
        try:
            done = await unless_disconnected(self._collect(parsed, writer), receive)
            flight.outcome = "completed" if done else "cancelled"
        finally:
            flight.close()
        if not done:
            return Response(status_code=_CLIENT_GONE)
        return JSONResponse(writer.body(), headers=headers)

    async def _collect(self, parsed: CompletionRequest, writer: Writer) -> None:
        async with aclosing(self.source.tokens(parsed, writer.details)) as tokens:
            async for index in tokens:
                writer.tokens_sent = index + 1

"""OpenAI chat/completions/embeddings routes. Bodies stay opaque: only the fields routing needs
are read and checked; every other field passes through untouched, and `model` is rewritten per
endpoint by the proxy. Errors have OpenAI's shape.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.types import Send

from gateway.core import tokens
from gateway.errors import GatewayError
from gateway.server import openapi
from gateway.server.exchange import Exchange
from gateway.server.intake import (
    invalid,
    model_of,
    positive_int,
    route_request,
    stream_flag,
    take,
)
from gateway.upstream.client import UpstreamCall

# The routes as FastAPI documents them in /openapi.json. The POST routes are served by `handle`,
# past FastAPI's middleware and routing (app.py: GatewayApp).
documented = APIRouter()
Kind = Literal["chat", "completions", "embeddings"]
Handler = Callable[[Request, Send], Awaitable[None]]


@dataclass(slots=True)
class RouteFields:
    model: str
    stream: bool
    max_tokens: int | None


# These three are never called: GatewayApp serves their POSTs directly (see gateway/server/app.py).
@documented.post("/v1/chat/completions", openapi_extra=openapi.completion_route(openapi.CHAT_BODY))
async def chat_completions() -> None:
    raise NotImplementedError("served by GatewayApp")


@documented.post("/v1/completions", openapi_extra=openapi.completion_route(openapi.COMPLETION_BODY))
async def completions() -> None:
    raise NotImplementedError("served by GatewayApp")


@documented.post("/v1/embeddings", openapi_extra=openapi.completion_route(openapi.EMBEDDINGS_BODY))
async def embeddings() -> None:
    raise NotImplementedError("served by GatewayApp")


# path -> (the path below an endpoint's base URL, the kind of body)
PATHS: dict[str, tuple[str, Kind]] = {
    "/v1/chat/completions": ("/chat/completions", "chat"),
    "/v1/completions": ("/completions", "completions"),
    "/v1/embeddings": ("/embeddings", "embeddings"),
}


async def handle(request: Request, send: Send) -> None:
    """Parse and classify, then hand the request to `Router.handle`, which answers it."""
    path, kind = PATHS[request.scope["path"]]
    intake = await take(request)
    body = intake.body
    fields = route_fields(body, kind)
    route = route_request(
        intake,
        request,
        "chat",
        model=fields.model,
        prompt_tokens=tokens.estimate_prompt_tokens(body),
        max_tokens=fields.max_tokens,
        stream=fields.stream,
    )
    hints = intake.hints(route) if kind != "embeddings" else None
    label = intake.record.request_id  # the client's x-request-id, forwarded as it came
    call = UpstreamCall(label, path, body, fields.model, fields.stream, hints=hints)
    exchange = Exchange(route, call, intake.record, request.receive, send)
    await intake.runtime.router.handle(exchange)


async def render_error(request: Request, exc: GatewayError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.response_headers())


POSTS: dict[str, Handler] = dict.fromkeys(PATHS, handle)


def route_fields(body: dict[str, Any], kind: Kind) -> RouteFields:
    model = model_of(body)
    stream = stream_flag(body)
    _required_input(body, kind)
    if kind == "embeddings":  # no output: judged and predicted by its TTFT alone
        return RouteFields(model, False, 0)
    return RouteFields(model, stream, _max_tokens(body))


def _required_input(body: dict[str, Any], kind: Kind) -> None:
    if kind == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise invalid("'messages' must be a non-empty array of message objects.", "messages")
        if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise invalid("Each message must be an object with a string 'role'.", "messages")
    elif kind == "completions" and not isinstance(body.get("prompt"), str | list):
        raise invalid("'prompt' must be a string or an array.", "prompt")
    elif kind == "embeddings" and not isinstance(body.get("input"), str | list):
        raise invalid("'input' must be a string or an array.", "input")


def _max_tokens(body: dict[str, Any]) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = positive_int(body, name)
        if value is not None:
            return value
    return None

"""OpenAI routes. Bodies stay opaque: only the fields routing needs are read and checked; every
other field passes through untouched, and `model` is rewritten per endpoint by the proxy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Send

from gateway.core import tokens
from gateway.errors import BodyTooLarge, InvalidRequest, ModelNotFound
from gateway.server import openapi
from gateway.server.runtime import Runtime
from gateway.telemetry.record import RequestRecord
from gateway.upstream.client import UpstreamCall
from policies.base import RouteRequest

# The routes as FastAPI documents them in /openapi.json (and serves GET /v1/models). The POST
# routes are served by `post`, past FastAPI's middleware and routing (app.py: GatewayApp).
documented = APIRouter()
Kind = Literal["chat", "completions", "embeddings"]
STREAM_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


@dataclass(slots=True)
class Fields:
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


@documented.get("/v1/models", openapi_extra=openapi.models_route())
async def models(request: Request) -> JSONResponse:
    runtime: Runtime = request.app.state.runtime
    runtime.keyring.caller(request.headers.get("authorization"))
    data = [
        {"id": m, "object": "model", "created": 0, "owned_by": "slo-gateway"}
        for m in runtime.registry.models()
    ]
    return JSONResponse({"object": "list", "data": data})


# path -> (the path below an endpoint's base URL, the kind of body)
POSTS: dict[str, tuple[str, Kind]] = {
    "/v1/chat/completions": ("/chat/completions", "chat"),
    "/v1/completions": ("/completions", "completions"),
    "/v1/embeddings": ("/embeddings", "embeddings"),
}


async def handle(request: Request, send: Send, path: str, kind: Kind) -> None:
    """Parse and classify, then hand the request to `Router.handle`, which answers it."""
    runtime: Runtime = request.app.state.runtime
    caller = runtime.keyring.caller(request.headers.get("authorization"))
    request.state.tenant = caller.tenant
    record: RequestRecord = request.state.record
    body = await read_body(request, runtime.config.server.max_body_bytes)
    record.body = body
    fields = route_fields(body, kind)
    if not runtime.registry.serving(fields.model):
        raise ModelNotFound(
            f"The model {fields.model!r} does not exist or you do not have access to it.",
            code="model_not_found",
            param="model",
        )
    slo = runtime.keyring.slo(caller, request.headers.get("x-slo-class"))
    route = RouteRequest(
        request_id=request.state.request_id,
        model=fields.model,
        tenant=caller.tenant,
        slo=slo,
        prompt_tokens=tokens.estimate_prompt_tokens(body),
        max_tokens=fields.max_tokens,
        stream=fields.stream,
        seq=runtime.next_seq(),
    )
    hints = runtime.keyring.hints(caller, slo.name) if kind != "embeddings" else None
    call = UpstreamCall(route.request_id, path, body, fields.model, fields.stream, hints)
    await runtime.router.handle(route, call, record, request.receive, send)


async def read_body(request: Request, max_bytes: int) -> dict[str, Any]:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(max_bytes)
    raw = await _read(request.receive, max_bytes)
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # nesting too deep
        raise InvalidRequest(
            f"The request body is not valid JSON ({exc}). Send a JSON object with "
            "'Content-Type: application/json'.",
            code="invalid_json",
        ) from None
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.", code="invalid_json")
    return body


async def _read(receive: Receive, max_bytes: int) -> bytes:
    """The body from the ASGI messages (Request.stream's async generator costs more)."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        part = message.get("body", b"")
        size += len(part)
        if size > max_bytes:
            raise _too_large(max_bytes)
        parts.append(part)
        if not message.get("more_body", False):
            return parts[0] if len(parts) == 1 else b"".join(parts)


def _too_large(max_bytes: int) -> BodyTooLarge:
    return BodyTooLarge(
        f"The request body exceeds the gateway's limit of {max_bytes} bytes; shorten the prompt.",
        code="request_too_large",
    )


def route_fields(body: dict[str, Any], kind: Kind) -> Fields:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _invalid("You must provide a model parameter (a non-empty string).", "model")
    stream = body.get("stream", False)
    if not isinstance(stream, bool) and stream is not None:
        raise _invalid("'stream' must be a boolean.", "stream")
    _required_input(body, kind)
    return Fields(model, bool(stream) and kind != "embeddings", _max_tokens(body))


def _required_input(body: dict[str, Any], kind: Kind) -> None:
    if kind == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _invalid("'messages' must be a non-empty array of message objects.", "messages")
        if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise _invalid("Each message must be an object with a string 'role'.", "messages")
    elif kind == "completions" and not isinstance(body.get("prompt"), str | list):
        raise _invalid("'prompt' must be a string or an array.", "prompt")
    elif kind == "embeddings" and not isinstance(body.get("input"), str | list):
        raise _invalid("'input' must be a string or an array.", "input")


def _max_tokens(body: dict[str, Any]) -> int | None:
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise _invalid(f"'{name}' must be a positive integer.", name)
        return value
    return None


def _invalid(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, code="invalid_value", param=param)

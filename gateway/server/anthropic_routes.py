"""Anthropic Messages routes: `POST /v1/messages` and `/v1/messages/count_tokens` through
`Router.handle`, to endpoints whose `apis` include `messages`.

The key may come as `x-api-key` (the SDK's `api_key`) or `Authorization: Bearer` (its
`auth_token`, Claude Code's ANTHROPIC_AUTH_TOKEN); the endpoint gets its own key instead.
`anthropic-version` (2023-06-01 when absent) and `anthropic-beta` are forwarded; the `?beta=true`
query of the SDK's beta client is ignored. Routing reads `model`, `stream`, `max_tokens`
(required), `system`, `messages` and `tools`; every other field passes through untouched. Every
answer carries `request-id`, and errors the gateway writes have Anthropic's shape
(`{"type": "error", "error": {"type", "message"}, "request_id"}`, gateway/errors.py).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.types import Send

from gateway.config.settings import ANTHROPIC_VERSION
from gateway.core import tokens
from gateway.errors import GatewayError
from gateway.server import openapi
from gateway.server.exchange import Exchange
from gateway.server.intake import (
    Intake,
    invalid,
    model_of,
    positive_int,
    route_request,
    stream_flag,
    take,
)
from gateway.upstream.client import UpstreamCall
from gateway.upstream.messages_events import MESSAGES

documented = APIRouter()
# path -> the path below an endpoint's base URL
PATHS = {"/v1/messages": "/messages", "/v1/messages/count_tokens": "/messages/count_tokens"}


@documented.post("/v1/messages", openapi_extra=openapi.messages_route(openapi.MESSAGES_BODY))
async def create_message() -> None:
    raise NotImplementedError("served by GatewayApp")


@documented.post(
    "/v1/messages/count_tokens", openapi_extra=openapi.messages_route(openapi.COUNT_TOKENS_BODY)
)
async def count_tokens() -> None:
    raise NotImplementedError("served by GatewayApp")


async def handle(request: Request, send: Send) -> None:
    """Parse and classify, then hand the request to `Router.handle`, which answers it."""
    path = PATHS[request.scope["path"]]
    intake = await take(request, api_key_header=True)
    body = intake.body
    counting = path.endswith("count_tokens")
    model = model_of(body)
    _check_messages(body)
    max_tokens = positive_int(body, "max_tokens")
    if max_tokens is None and not counting:
        raise invalid("'max_tokens' is required: a positive integer.", "max_tokens")
    stream = stream_flag(body) and not counting
    route = route_request(
        intake,
        request,
        "messages",
        model=model,
        prompt_tokens=tokens.estimate_message_tokens(body),
        max_tokens=max_tokens,
        stream=stream,
    )
    call = UpstreamCall(
        intake.record.request_id,
        path,
        body,
        model,
        stream,
        MESSAGES,
        "messages",
        headers=_forwarded(intake),
        reply_headers=(("request-id", intake.record.request_id),),
        hints=None if counting else intake.hints(route),  # counting schedules nothing
        counting=counting,
    )
    exchange = Exchange(route, call, intake.record, request.receive, send)
    await intake.runtime.router.handle(exchange)


POSTS = dict.fromkeys(PATHS, handle)


def _check_messages(body: dict[str, Any]) -> None:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("'messages' must be a non-empty array of message objects.", "messages")
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
        raise invalid("Each message must be an object with a string 'role'.", "messages")
    system = body.get("system")
    if system is not None and not isinstance(system, str | list):
        raise invalid("'system' must be a string or an array of text blocks.", "system")


def _forwarded(intake: Intake) -> tuple[tuple[str, str], ...]:
    version = intake.headers.get(b"anthropic-version") or ANTHROPIC_VERSION
    beta = intake.headers.get(b"anthropic-beta")
    forwarded = (("anthropic-version", version),)
    return (*forwarded, ("anthropic-beta", beta)) if beta else forwarded


async def render_error(request: Request, exc: GatewayError) -> JSONResponse:
    """Anthropic's error shape, with the `request-id` header its SDK reads."""
    request_id = getattr(request.state, "request_id", None)
    headers = exc.response_headers()
    if request_id:
        headers = headers | {"request-id": request_id}
    return JSONResponse(exc.anthropic_body(request_id), status_code=exc.status, headers=headers)

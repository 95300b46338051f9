"""OpenAI Responses routes: `POST /v1/responses` through `Router.handle`, like chat, and the
stored-response routes (GET and DELETE `/v1/responses/{id}`, `POST .../cancel`, `GET
.../input_items`), which go to the response's owner (gateway/server/response_owners.py).

Routing reads `model`, `stream`, `max_output_tokens`, `input` (a string or items),
`instructions`, `tools`, `previous_response_id` and `store` (default true); a body `request_id`
(vLLM's extra field naming the response) is dropped, so a client never chooses a stored id;
every other field passes through untouched. A turn with `previous_response_id` is pinned to the
endpoint that stored its parent, and its prompt estimate includes the parent's tokens. Errors
have OpenAI's shape; an unknown or lost response is a 404 that says why.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.types import Send

from gateway.config.settings import EndpointConfig
from gateway.core import tokens
from gateway.errors import InvalidRequest, ResponseNotFound
from gateway.server import openapi
from gateway.server.exchange import Exchange
from gateway.server.intake import invalid, model_of, positive_int, route_request, stream_flag, take
from gateway.server.response_owners import Owner
from gateway.server.runtime import Runtime
from gateway.telemetry.record import RequestRecord
from gateway.upstream.client import UpstreamCall, owner_lost
from gateway.upstream.departure import Departure
from gateway.upstream.grammar import parsed, restamp_whole
from gateway.upstream.relay import client_disconnected
from gateway.upstream.responses_events import RESPONSES
from policies.base import RouteRequest

documented = APIRouter()


@dataclass(slots=True)
class ResponseFields:
    model: str
    stream: bool
    max_output_tokens: int | None
    previous_response_id: str | None
    store: bool


@documented.post("/v1/responses", openapi_extra=openapi.completion_route(openapi.RESPONSES_BODY))
async def create_response() -> None:
    raise NotImplementedError("served by GatewayApp")


async def handle(request: Request, send: Send) -> None:
    """Parse and classify (pinning a continued conversation to its owner), then route."""
    intake = await take(request)
    body = intake.body
    fields = response_fields(body)
    # vLLM names the response after a body `request_id`: a client choosing it could take over
    # another's stored response at the engine, so the engine picks the id
    body.pop("request_id", None)
    owner = None
    if fields.previous_response_id is not None:
        owner = await _parent(intake.runtime, fields, intake.caller.tenant)
    prompt_tokens = tokens.estimate_response_tokens(body) + (owner.context_tokens if owner else 0)
    route = route_request(
        intake,
        request,
        "responses",
        model=fields.model,
        prompt_tokens=prompt_tokens,
        max_tokens=fields.max_output_tokens,
        stream=fields.stream,
    )
    call = UpstreamCall(
        intake.record.request_id,
        "/responses",
        body,
        fields.model,
        fields.stream,
        RESPONSES,
        "responses",
        owner=owner.endpoint_id if owner else None,
        store=fields.store,
        hints=intake.hints(route),
    )
    exchange = Exchange(route, call, intake.record, request.receive, send)
    await intake.runtime.router.handle(exchange)


POSTS = {"/v1/responses": handle}


def response_fields(body: dict[str, Any]) -> ResponseFields:
    model = model_of(body)
    if not isinstance(body.get("input"), str | list):
        raise invalid("'input' must be a string or an array of input items.", "input")
    for name in ("instructions", "previous_response_id"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise invalid(f"'{name}' must be a string.", name)
    if body.get("tools") is not None and not isinstance(body["tools"], list):
        raise invalid("'tools' must be an array.", "tools")
    store = body.get("store", True)
    if not isinstance(store, bool) and store is not None:
        raise invalid("'store' must be a boolean.", "store")
    background = body.get("background")
    if background is not None and background is not False:  # 0 == False, yet not a boolean
        # the engine would run it after the answer, unseen: outside limits, usage and budget
        raise invalid(
            "'background' responses are not served by this gateway: send the request without "
            "it (stream it to follow it as it runs).",
            "background",
        )
    return ResponseFields(
        model,
        stream_flag(body),
        positive_int(body, "max_output_tokens"),
        body.get("previous_response_id"),
        store is not False,
    )


async def _parent(runtime: Runtime, fields: ResponseFields, tenant: str) -> Owner:
    """The owner of the response a turn continues; a 404 when there is none to go to."""
    assert fields.previous_response_id is not None
    owner, endpoint = await _owner(
        runtime, fields.previous_response_id, tenant, "previous_response_id"
    )
    if fields.model not in endpoint.models:
        raise InvalidRequest(
            f"The previous response is stored on endpoint {endpoint.id!r}, which does not serve "
            f"{fields.model!r}; continue it with {owner.public_model!r}.",
            code="invalid_value",
            param="model",
        )
    return owner


async def _owner(
    runtime: Runtime, response_id: str, tenant: str, param: str | None
) -> tuple[Owner, EndpointConfig]:
    owner = await runtime.owners.find(tenant, response_id)
    if owner is None or owner.tenant != tenant:
        raise ResponseNotFound(
            f"No response with id {response_id!r} is known to this gateway: it was never stored "
            "(store: false), was deleted, or its retention passed.",
            code="response_not_found",
            param=param,
        )
    endpoint = runtime.registry.endpoints.get(owner.endpoint_id)
    if endpoint is None or "responses" not in endpoint.apis:
        raise ResponseNotFound(
            f"Response {response_id!r} was stored on endpoint {owner.endpoint_id!r}, which this "
            "gateway no longer routes to; stored responses are never moved to another endpoint.",
            code="response_owner_gone",
            param=param,
        )
    return owner, endpoint


@documented.get("/v1/responses/{response_id}", openapi_extra=openapi.stored_route())
async def retrieve(response_id: str, request: Request) -> Response:
    return await _at_owner(request, response_id, "GET", "")


@documented.delete("/v1/responses/{response_id}", openapi_extra=openapi.stored_route())
async def delete(response_id: str, request: Request) -> Response:
    return await _at_owner(request, response_id, "DELETE", "")


@documented.post("/v1/responses/{response_id}/cancel", openapi_extra=openapi.stored_route())
async def cancel(response_id: str, request: Request) -> Response:
    return await _at_owner(request, response_id, "POST", "/cancel")


@documented.get("/v1/responses/{response_id}/input_items", openapi_extra=openapi.stored_route())
async def input_items(response_id: str, request: Request) -> Response:
    return await _at_owner(request, response_id, "GET", "/input_items")


async def _at_owner(request: Request, response_id: str, method: str, suffix: str) -> Response:
    """Relay one call about a stored response to its owner, and only there. It is one of the
    tenant's requests (its requests_per_min, a concurrency slot while it runs), known id or
    not, with no tokens."""
    runtime: Runtime = request.app.state.runtime
    caller = runtime.keyring.caller(request.headers.get("authorization"))
    request.state.tenant = caller.tenant
    slo = runtime.keyring.slo(caller, None)
    # keyed by the id the gateway minted: the client's x-request-id is only a label
    route = RouteRequest(
        request.state.gateway_id, "", caller.tenant, slo, 0, seq=runtime.next_seq()
    )
    record: RequestRecord = request.state.record
    await runtime.admission.admit_tenant(route, record)
    # a client that leaves gives its slot back at once, not when a stalled owner answers
    departure = Departure(lambda: client_disconnected(request.receive))
    try:
        with departure:
            return await _relay(runtime, request, caller.tenant, response_id, method, suffix)
    except asyncio.CancelledError:
        if not departure.left:
            raise  # cancelled from outside (shutdown), not by the client leaving
        departure.forgive()
        return Response(status_code=499)  # nobody reads it; the request log records it
    finally:
        runtime.admission.finished(route, record)


async def _relay(
    runtime: Runtime, request: Request, tenant: str, response_id: str, method: str, suffix: str
) -> Response:
    owner, endpoint = await _owner(runtime, response_id, tenant, None)
    path = f"/responses/{response_id}{suffix}"
    if request.url.query:
        path += f"?{request.url.query}"
    status, content_type, body = await runtime.upstream.request(
        endpoint, method, path, request.state.request_id
    )
    if status in (404, 405):  # it lost the response, or does not serve the route (vLLM)
        raise owner_lost(endpoint.id, param=None)
    if method == "DELETE" and status < 300:
        await runtime.owners.forget(tenant, response_id)
    whole = parsed(body) if status < 300 else None
    if whole is not None and runtime.config.server.response_model == "public":
        body = restamp_whole(body, whole, owner.public_model)
    headers = {
        "x-slo-gateway-endpoint": endpoint.id,
        "x-slo-gateway-upstream-model": owner.upstream_model,
    }
    return Response(body, status, headers=headers, media_type=content_type or None)

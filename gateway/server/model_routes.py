"""`GET /v1/models` and `GET /v1/models/{id}`, answered locally from the configured public names.

OpenAI's shape (`{id, object, created, owned_by}`, a list `{object, data}`), or Anthropic's
when the client sends `anthropic-version` (`{type, id, display_name, created_at}`, a list
`{data, has_more, first_id, last_id}` paged by `limit`, `after_id` and `before_id`), listing
then only the models served through the Messages API. Either key header is accepted.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from gateway.errors import InvalidRequest, ModelNotFound
from gateway.server import openapi
from gateway.server.runtime import Runtime

routes = APIRouter()
EPOCH = "1970-01-01T00:00:00Z"  # the gateway knows no creation date: Anthropic's `created_at`
MAX_LIMIT = 1000


def _models(request: Request) -> list[str]:
    runtime: Runtime = request.app.state.runtime
    headers = request.headers
    caller = runtime.keyring.caller(headers.get("authorization"), headers.get("x-api-key"))
    request.state.tenant = caller.tenant
    served = runtime.registry.models("messages" if anthropic(request) else None)
    return [model for model in served if caller.may_use(model)]


def anthropic(request: Request) -> bool:
    return "anthropic-version" in request.headers


@routes.get("/v1/models", openapi_extra=openapi.models_route())
async def list_models(request: Request) -> JSONResponse:
    models = _models(request)
    if not anthropic(request):
        return JSONResponse({"object": "list", "data": [_openai(m) for m in models]})
    page = _page(models, request)
    return JSONResponse(
        {
            "data": [_anthropic(m) for m in page],
            "has_more": bool(page) and page[-1] != models[-1],
            "first_id": page[0] if page else None,
            "last_id": page[-1] if page else None,
        }
    )


@routes.get("/v1/models/{model_id:path}", openapi_extra=openapi.model_route())
async def retrieve_model(model_id: str, request: Request) -> JSONResponse:
    if model_id not in _models(request):
        raise ModelNotFound(
            f"The model {model_id!r} does not exist or you do not have access to it.",
            code="model_not_found",
            param="model",
        )
    return JSONResponse(_anthropic(model_id) if anthropic(request) else _openai(model_id))


def _openai(model: str) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": 0, "owned_by": "slo-gateway"}


def _anthropic(model: str) -> dict[str, Any]:
    return {"type": "model", "id": model, "display_name": model, "created_at": EPOCH}


def _page(models: list[str], request: Request) -> list[str]:
    query = request.query_params
    limit_text = query.get("limit", "20")
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_LIMIT:
        raise InvalidRequest(
            f"limit must be an integer from 1 to {MAX_LIMIT}.", code="invalid_value", param="limit"
        )
    limit = int(limit_text)
    after, before = query.get("after_id"), query.get("before_id")
    if before in models:
        return models[: models.index(before)][-limit:]
    start = models.index(after) + 1 if after in models else 0
    return models[start : start + limit]

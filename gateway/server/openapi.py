"""The OpenAPI description of the API routes' request bodies and error responses.

The routes read raw bodies (parsing stays opaque and fast, see intake.py), so FastAPI cannot
infer their schemas; these are attached with `openapi_extra`. Each body schema states exactly
what the gateway itself checks, no more: a field the gateway passes through untouched
(temperature, tools, ...) accepts anything here, because the endpoint, not the gateway, judges
it. Every error the gateway answers has OpenAI's shape, `ERROR`, except on the Anthropic routes
(`ANTHROPIC_ERROR`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

_POSITIVE_INT_OR_NULL = {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]}
_PASSED_THROUGH = "Any other OpenAI field is passed to the endpoint untouched."
_COMMON = {
    "model": {"type": "string", "minLength": 1, "description": "A public model name."},
    "stream": {"type": ["boolean", "null"]},
    "max_tokens": _POSITIVE_INT_OR_NULL,
    "max_completion_tokens": _POSITIVE_INT_OR_NULL,
}

CHAT_BODY: dict[str, Any] = {
    "type": "object",
    "description": _PASSED_THROUGH,
    "required": ["model", "messages"],
    "properties": _COMMON
    | {
        "messages": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["role"],
                "properties": {"role": {"type": "string"}},
            },
        }
    },
}
COMPLETION_BODY: dict[str, Any] = {
    "type": "object",
    "description": _PASSED_THROUGH,
    "required": ["model", "prompt"],
    "properties": _COMMON | {"prompt": {"type": ["string", "array"]}},
}
EMBEDDINGS_BODY: dict[str, Any] = {
    "type": "object",
    "description": _PASSED_THROUGH,
    "required": ["model", "input"],
    "properties": _COMMON | {"input": {"type": ["string", "array"]}},
}

_STRING_OR_NULL = {"type": ["string", "null"]}
RESPONSES_BODY: dict[str, Any] = {
    "type": "object",
    "description": _PASSED_THROUGH,
    "required": ["model", "input"],
    "properties": {
        "model": _COMMON["model"],
        "stream": _COMMON["stream"],
        "max_output_tokens": _POSITIVE_INT_OR_NULL,
        "input": {"type": ["string", "array"]},
        "instructions": _STRING_OR_NULL,
        "previous_response_id": _STRING_OR_NULL,
        "store": {"type": ["boolean", "null"]},
        "tools": {"type": ["array", "null"]},
        "background": {"enum": [False, None], "description": "Background responses are refused."},
    },
}
_MESSAGES = CHAT_BODY["properties"]["messages"]
_SYSTEM = {"anyOf": [{"type": "string"}, {"type": "array"}, {"type": "null"}]}
MESSAGES_BODY: dict[str, Any] = {
    "type": "object",
    "description": "Any other Anthropic field is passed to the endpoint untouched.",
    "required": ["model", "messages", "max_tokens"],
    "properties": {
        "model": _COMMON["model"],
        "stream": _COMMON["stream"],
        "max_tokens": {"type": "integer", "minimum": 1},
        "messages": _MESSAGES,
        "system": _SYSTEM,
    },
}
COUNT_TOKENS_BODY: dict[str, Any] = {
    "type": "object",
    "description": "Any other Anthropic field is passed to the endpoint untouched.",
    "required": ["model", "messages"],
    "properties": {"model": _COMMON["model"], "messages": _MESSAGES, "system": _SYSTEM},
}

ERROR: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "integer", "null"]},
            },
        }
    },
}
_ERROR_STATUSES = {
    "400": "Malformed JSON or an invalid field (also an endpoint's own 400, relayed).",
    "401": "Missing or unknown API key.",
    "403": "An SLO class this API key may not use.",
    "404": "Unknown model.",
    "413": "The body exceeds server.max_body_bytes.",
    "422": "The endpoint refused the request (relayed).",
    "429": "A tenant limit, shedding, or every endpoint rate limited; see Retry-After.",
    "502": "Every endpoint tried failed before responding.",
    "503": "No endpoint available, or the admission queue deadline passed; see Retry-After.",
    "504": "No endpoint answered within the first-byte timeout.",
}


def _optional_header(name: str, description: str) -> dict[str, Any]:
    """An OpenAPI parameter: a string header the client may send."""
    return {
        "name": name,
        "in": "header",
        "required": False,
        "description": description,
        "schema": {"type": "string"},
    }


_SLO_CLASS = _optional_header(
    "x-slo-class", "An SLO class the API key's tenant may use (else its default class)."
)


ANTHROPIC_ERROR: dict[str, Any] = {
    "type": "object",
    "required": ["type", "error"],
    "properties": {
        "type": {"const": "error"},
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
        },
        "request_id": {"type": ["string", "null"]},
    },
}
_API_KEY = _optional_header("x-api-key", "The API key (or send it as Authorization: Bearer).")


def error_responses(statuses: dict[str, str], schema: dict[str, Any] = ERROR) -> dict[str, Any]:
    body = {"application/json": {"schema": schema}}
    return {status: {"description": text, "content": body} for status, text in statuses.items()}


def completion_route(body: dict[str, Any]) -> dict[str, Any]:
    """`openapi_extra` of a POST route that reads `body` and may stream."""
    ok = {
        "description": "The endpoint's answer: JSON, or SSE when streaming.",
        "content": {"application/json": {"schema": {}}, "text/event-stream": {"schema": {}}},
    }
    return {
        "parameters": [_SLO_CLASS],
        "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
        "responses": {"200": ok} | error_responses(_ERROR_STATUSES),
    }


def messages_route(body: dict[str, Any]) -> dict[str, Any]:
    """`openapi_extra` of an Anthropic POST route: its errors have Anthropic's shape."""
    route = completion_route(body)
    route["parameters"] = [_SLO_CLASS, _API_KEY]
    route["responses"] = {"200": route["responses"]["200"]} | error_responses(
        _ERROR_STATUSES, ANTHROPIC_ERROR
    )
    return route


def models_route() -> dict[str, Any]:
    return {"responses": error_responses({"401": _ERROR_STATUSES["401"]})}


def model_route() -> dict[str, Any]:
    return {"responses": error_responses({"401": _ERROR_STATUSES["401"], "404": "Unknown model."})}


def stored_route() -> dict[str, Any]:
    """A call about a stored response, relayed to its owner."""
    statuses = {
        "401": _ERROR_STATUSES["401"],
        "404": "No such stored response, or its owner no longer has it.",
        "429": "A tenant limit: each call counts as one of the tenant's requests.",
        "502": "The owner did not answer.",
    }
    return {"responses": error_responses(statuses)}


def admin_body(model: type[BaseModel], required: bool = True) -> dict[str, Any]:
    """An admin route's JSON body, described by the Pydantic model that validates it (its
    `$defs` inlined: the document has no components for them)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})
    return {
        "requestBody": {
            "required": required,
            "content": {"application/json": {"schema": _inlined(schema, defs)}},
        },
        "responses": error_responses(
            {"400": "Unknown field or bad value (`param` names it)", "401": "Not the admin key"}
        ),
    }


def _inlined(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inlined(defs[ref.removeprefix("#/$defs/")], defs)
        return {key: _inlined(value, defs) for key, value in node.items()}
    if isinstance(node, list):
        return [_inlined(item, defs) for item in node]
    return node

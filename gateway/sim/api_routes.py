"""The Responses and Messages routes of a simulated engine or provider, over its `Frontend`:
the same faults, token source and flight accounting as chat, in each API's wire format.

    POST /v1/responses                       stream or whole (responses_wire.py)
    GET, DELETE /v1/responses/{id}           a response this server stored
    POST /v1/responses/{id}/cancel, GET /v1/responses/{id}/input_items
    POST /v1/messages                        stream or whole (messages_wire.py), Anthropic errors
    POST /v1/messages/count_tokens           {"input_tokens": n}

vLLM 0.32 serves all of these but DELETE and input_items; the simulator serves them all, as
OpenAI's hosted API does.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway.sim.frontend import Frontend, Writer, error_response
from gateway.sim.messages_wire import anthropic_error, messages_prompt_tokens, parse_message_request
from gateway.sim.responses_wire import (
    ResponseStore,
    UnknownResponse,
    deleted_body,
    input_items_body,
    parse_response_request,
)
from gateway.sim.wire import CompletionRequest, InvalidBody, error_body


class ApiRoutes:
    def __init__(self, frontend: Frontend) -> None:
        self.frontend = frontend
        self.store = ResponseStore()

    def routes(self) -> list[Route]:
        stored = "/v1/responses/{response_id}"
        return [
            Route("/v1/responses", self.create_response, methods=["POST"]),
            Route(stored, self.retrieve, methods=["GET"]),
            Route(stored, self.delete, methods=["DELETE"]),
            Route(stored + "/cancel", self.cancel, methods=["POST"]),
            Route(stored + "/input_items", self.input_items, methods=["GET"]),
            Route("/v1/messages", self.create_message, methods=["POST"]),
            Route("/v1/messages/count_tokens", self.count_tokens, methods=["POST"]),
        ]

    async def create_response(self, request: Request) -> Response:
        default = self.frontend.options.default_max_tokens

        def parse(body: Any) -> tuple[CompletionRequest, Writer]:
            try:
                return parse_response_request(body, self.store, default_max_tokens=default)
            except UnknownResponse as unknown:
                raise _NotFound(str(unknown)) from None

        try:
            return await self.frontend.answer(self.frontend.serve(request, parse))
        except _NotFound as missing:
            return _not_found(missing.response_id, "previous_response_id")

    async def retrieve(self, request: Request) -> Response:
        return await self._stored(request, lambda response_id: self.store.get(response_id).body)

    async def delete(self, request: Request) -> Response:
        def forget(response_id: str) -> dict[str, Any]:
            self.store.get(response_id)
            del self.store.responses[response_id]
            return deleted_body(response_id)

        return await self._stored(request, forget)

    async def cancel(self, request: Request) -> Response:
        def cancel(response_id: str) -> dict[str, Any]:
            body = self.store.get(response_id).body
            if body["status"] in ("queued", "in_progress"):
                body["status"] = "cancelled"
            return body

        return await self._stored(request, cancel)

    async def input_items(self, request: Request) -> Response:
        return await self._stored(
            request, lambda response_id: input_items_body(self.store.get(response_id))
        )

    async def _stored(self, request: Request, work: Any) -> Response:
        refused = self.frontend.unauthorized(request) or await self.frontend.held(request)
        if refused is not None:
            return refused
        response_id = request.path_params["response_id"]
        try:
            return JSONResponse(work(response_id))
        except UnknownResponse:
            return _not_found(response_id, "response_id")

    async def create_message(self, request: Request) -> Response:
        def parse(body: Any) -> tuple[CompletionRequest, Writer]:
            return parse_message_request(body)

        return anthropic_error(await self.frontend.answer(self.frontend.serve(request, parse)))

    async def count_tokens(self, request: Request) -> Response:
        refused = self.frontend.unauthorized(request)
        if refused is not None:
            return anthropic_error(refused)
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise InvalidBody("the request body must be a JSON object")
            return JSONResponse({"input_tokens": messages_prompt_tokens(body)})
        except (ValueError, InvalidBody) as exc:
            return anthropic_error(error_response(400, str(exc), "invalid_request_error"))


class _NotFound(Exception):
    def __init__(self, response_id: str) -> None:
        super().__init__(response_id)
        self.response_id = response_id


def _not_found(response_id: str, param: str) -> JSONResponse:
    body = error_body(
        f"Response with id '{response_id}' not found.",
        "invalid_request_error",
        code=404,
        param=param,
    )
    return JSONResponse(body, 404)

"""The OpenAI Responses wire format as the simulated servers speak it, following vLLM's and
OpenAI's event order: response.created and .in_progress at once (before any token, as vLLM
sends them before prefill), then per output message output_item.added, content_part.added,
output_text.delta per token, output_text.done, content_part.done, output_item.done, and the
terminal response.completed (or response.incomplete when `max_output_tokens` cut the answer).
Every event carries a `sequence_number`; there is no `[DONE]`.

Stored responses (`store`, default true) live in this server's memory only, as vLLM keeps
them: a restarted server knows none, and `previous_response_id` naming an unknown one is a 404
with `param: previous_response_id`. A continued turn's prompt replays its parent's (prompt and
answer, then the new input), as vLLM renders it, so the engine's prefix cache can serve the
replayed part; usage reports the cached tokens in `input_tokens_details.cached_tokens`.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from gateway.sim.tool_calls import arguments, arguments_piece, forced_tool
from gateway.sim.wire import (
    CompletionRequest,
    InvalidBody,
    PromptDetails,
    optional_positive,
    prompt_text,
    request_object,
    token_text,
)
from gateway.sim.wire_text import event_frame, text_tokens


class UnknownResponse(LookupError):
    """A response id this server never stored (or deleted)."""


@dataclass(slots=True)
class StoredResponse:
    body: dict[str, Any]
    input_items: list[dict[str, Any]]
    context_tokens: int  # what a turn continuing it replays: its input and output
    context_text: str = ""  # the same as text: its rendered prompt and its answer


@dataclass(slots=True)
class ResponseStore:
    responses: dict[str, StoredResponse] = field(default_factory=dict)

    def get(self, response_id: str) -> StoredResponse:
        stored = self.responses.get(response_id)
        if stored is None:
            raise UnknownResponse(response_id)
        return stored


def parse_response_request(
    body: Any, store: ResponseStore, *, default_max_tokens: int
) -> tuple[CompletionRequest, ResponsesWriter]:
    body, model = request_object(body)
    max_tokens = optional_positive(body.get("max_output_tokens"), "max_output_tokens")
    items = _input_items(body.get("input"))
    parent_id = body.get("previous_response_id")
    parent = store.get(parent_id) if isinstance(parent_id, str) else None
    texts = [body.get("instructions") or ""] + [_item_text(item) for item in items]
    context = parent.context_tokens if parent else 0
    request = CompletionRequest(
        kind="chat",
        model=model,
        stream=bool(body.get("stream", False)),
        include_usage=True,
        prompt_tokens=max(1, text_tokens(texts) + 4 * len(items) + context),
        max_tokens=max_tokens or default_max_tokens,
        max_tokens_given=max_tokens is not None,
        prompt_text=_rendered(body, items, parent),
        tool=forced_tool(body, "responses"),
        request_id=_response_id(body),
    )
    return request, ResponsesWriter(request, body, items, store)


def _response_id(body: dict[str, Any]) -> str:
    """vLLM's: the body's `request_id` when given (an extra field it documents), else a new
    `resp_` id."""
    given = body.get("request_id")
    return given if isinstance(given, str) and given else f"resp_{uuid.uuid4().hex}"


def _rendered(
    body: dict[str, Any], items: list[dict[str, Any]], parent: StoredResponse | None
) -> str:
    """The prompt as the engine's template renders it: the parent's prompt and answer first."""
    turns = [{"role": item.get("role", "user"), "content": _item_text(item)} for item in items]
    if parent is None and isinstance(body.get("instructions"), str):
        turns.insert(0, {"role": "system", "content": body["instructions"]})
    text = prompt_text({"messages": turns}, "chat")
    return parent.context_text + text if parent else text


def _input_items(raw: Any) -> list[dict[str, Any]]:
    if isinstance(raw, str):
        return [{"type": "message", "role": "user", "content": raw}]
    if isinstance(raw, list) and all(isinstance(item, dict) for item in raw):
        return list(raw)
    raise InvalidBody("'input' must be a string or a list of input items")


def _item_text(item: dict[str, Any]) -> str:
    content = item.get("content", item.get("output", ""))
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


class ResponsesWriter:
    """The events and the body of one response; it stores the response when asked to."""

    def __init__(
        self,
        request: CompletionRequest,
        body: dict[str, Any],
        items: list[dict[str, Any]],
        store: ResponseStore,
    ) -> None:
        self.request = request
        self.id = request.request_id
        self.message_id = "msg_" + request.request_id.removeprefix("resp_")
        self.call_item_id = "fc_" + request.request_id.removeprefix("resp_")
        self.created_at = int(time.time())
        self.tokens_sent = 0
        self.details = PromptDetails()  # the token source fills in the cached tokens
        self._sequence = 0
        self._body, self._items, self._store = body, items, store
        self._stores = body.get("store", True) is not False

    def start(self) -> bytes:
        snapshot = self.response("in_progress")
        self._keep(snapshot)
        return self._event("response.created", response=snapshot) + self._event(
            "response.in_progress", response=snapshot
        )

    def chunk(self, index: int) -> bytes:
        if self.request.tool is not None:
            return self._call_chunk(index)
        opening = b""
        if index == 0:
            item = self._message("in_progress", "")
            opening = self._event("response.output_item.added", output_index=0, item=item)
            opening += self._event("response.content_part.added", **self._at(), part=_text_part(""))
        self.tokens_sent += 1
        delta = self._event(
            "response.output_text.delta", **self._at(), delta=token_text(index), logprobs=[]
        )
        return opening + delta

    def _call_chunk(self, index: int) -> bytes:
        opening = b""
        if index == 0:
            item = self._output("in_progress", "")
            opening = self._event("response.output_item.added", output_index=0, item=item)
        self.tokens_sent += 1
        last = index == self.request.max_tokens - 1
        piece = arguments_piece(token_text(index), index == 0, last)
        delta = self._event(
            "response.function_call_arguments.delta",
            item_id=self.call_item_id,
            output_index=0,
            delta=piece,
        )
        return opening + delta

    def end(self) -> bytes:
        if self.request.tool is not None:
            return self._call_end()
        text = self.text()
        done = self._event("response.output_text.done", **self._at(), text=text, logprobs=[])
        done += self._event("response.content_part.done", **self._at(), part=_text_part(text))
        item = self._message("completed", text)
        done += self._event("response.output_item.done", output_index=0, item=item)
        final = self.body()
        return done + self._event(f"response.{final['status']}", response=final)

    def _call_end(self) -> bytes:
        call = arguments(self.text())
        done = self._event(
            "response.function_call_arguments.done",
            item_id=self.call_item_id,
            output_index=0,
            arguments=call,
        )
        item = self._output("completed", self.text())
        done += self._event("response.output_item.done", output_index=0, item=item)
        final = self.body()
        return done + self._event(f"response.{final['status']}", response=final)

    def body(self) -> dict[str, Any]:
        status = "incomplete" if self.request.max_tokens_given else "completed"
        if self.request.tool is not None:
            status = "completed"  # the call is whole: its arguments close with the last token
        final = self.response(status) | {"output": [self._output("completed", self.text())]}
        final["usage"] = self.usage()
        if status == "incomplete":
            final["incomplete_details"] = {"reason": "max_output_tokens"}
        self._keep(final)
        return final

    def text(self) -> str:
        return "".join(token_text(i) for i in range(self.tokens_sent))

    def usage(self) -> dict[str, Any]:
        prompt, output = self.request.prompt_tokens, self.tokens_sent
        return {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": self.details.cached_tokens},
            "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + output,
        }

    def response(self, status: str) -> dict[str, Any]:
        body = self._body
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": self.request.model,
            "output": [],
            "parallel_tool_calls": True,
            "previous_response_id": body.get("previous_response_id"),
            "store": self._stores,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": None,
            "metadata": {},
        }

    def _keep(self, response: dict[str, Any]) -> None:
        if self._stores:
            context = self.request.prompt_tokens + self.tokens_sent
            text = self.request.prompt_text + self.text() + "\n"
            self._store.responses[self.id] = StoredResponse(response, self._items, context, text)

    def _output(self, status: str, text: str) -> dict[str, Any]:
        """The answer's one output item: a message, or the forced function's call."""
        if self.request.tool is None:
            return self._message(status, text)
        return {
            "id": self.call_item_id,
            "type": "function_call",
            "status": status,
            "call_id": "call_" + self.request.request_id,
            "name": self.request.tool,
            "arguments": arguments(text) if status == "completed" else "",
        }

    def _message(self, status: str, text: str) -> dict[str, Any]:
        content = [_text_part(text)] if text or status == "completed" else []
        return {
            "id": self.message_id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        }

    def _at(self) -> dict[str, Any]:
        return {"item_id": self.message_id, "output_index": 0, "content_index": 0}

    def _event(self, kind: str, **fields: Any) -> bytes:
        frame = event_frame(kind, {"type": kind, **fields, "sequence_number": self._sequence})
        self._sequence += 1
        return frame


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


def deleted_body(response_id: str) -> dict[str, Any]:
    return {"id": response_id, "object": "response.deleted", "deleted": True}


def input_items_body(stored: StoredResponse) -> dict[str, Any]:
    data = [{"id": f"item_{i}", **item} for i, item in enumerate(stored.input_items)]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": False,
    }

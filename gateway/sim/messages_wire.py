"""The Anthropic Messages wire format as the simulated servers speak it: message_start (usage
with the prompt's input tokens), a `ping`, one text block (content_block_start, a text_delta per
token, content_block_stop), message_delta (stop_reason, the cumulative output tokens) and
message_stop; the whole-answer body; `count_tokens`; and Anthropic's error shape, into which
the frontend's OpenAI-shaped refusals are turned (`anthropic_error`).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse, Response

from gateway.errors import ANTHROPIC_TYPES
from gateway.sim.tool_calls import arguments_piece, forced_tool
from gateway.sim.wire import (
    CompletionRequest,
    InvalidBody,
    PromptDetails,
    output_text,
    prompt_text,
    request_object,
    token_text,
)
from gateway.sim.wire_text import event_frame, text_tokens


def messages_prompt_tokens(body: dict[str, Any]) -> int:
    """chars/4 of the system prompt and the messages' text, plus 4 per message."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidBody("messages: at least one message is required")
    texts = [_text(body.get("system"))] + [
        _text(m.get("content")) if isinstance(m, dict) else "" for m in messages
    ]
    return max(1, text_tokens(texts) + 4 * len(messages))


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(block.get("text", "")) for block in content if isinstance(block, dict))
    return ""


def parse_message_request(body: Any) -> tuple[CompletionRequest, MessagesWriter]:
    body, model = request_object(body, "model: Field required")
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidBody("max_tokens: a positive integer is required")
    request = CompletionRequest(
        kind="chat",
        model=model,
        stream=bool(body.get("stream", False)),
        include_usage=True,
        prompt_tokens=messages_prompt_tokens(body),
        max_tokens=max_tokens,
        max_tokens_given=True,
        prompt_text=_rendered(body),
        tool=forced_tool(body, "messages"),
    )
    return request, MessagesWriter(request)


def _rendered(body: dict[str, Any]) -> str:
    """The prompt as the engine's template renders it (what its prefix cache hashes)."""
    turns = [
        {"role": m.get("role"), "content": _text(m.get("content"))}
        for m in body["messages"]
        if isinstance(m, dict)
    ]
    if body.get("system"):
        turns.insert(0, {"role": "system", "content": _text(body["system"])})
    return prompt_text({"messages": turns}, "chat")


class MessagesWriter:
    """The events and the body of one message."""

    def __init__(self, request: CompletionRequest) -> None:
        self.request = request
        self.id = "msg_" + request.request_id
        self.tokens_sent = 0
        self.details = PromptDetails()  # the token source fills in the cached tokens

    def start(self) -> bytes:
        message = self._envelope() | {"content": [], "stop_reason": None}
        message["usage"] = self.usage() | {"output_tokens": 0}
        opening = event_frame("message_start", {"type": "message_start", "message": message})
        return opening + event_frame("ping", {"type": "ping"})

    def chunk(self, index: int) -> bytes:
        opening = b""
        if index == 0:
            block = self._block("")
            opening = event_frame(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": block},
            )
        self.tokens_sent += 1
        delta = {"type": "text_delta", "text": token_text(index)}
        if self.request.tool is not None:
            last = index == self.request.max_tokens - 1
            piece = arguments_piece(token_text(index), index == 0, last)
            delta = {"type": "input_json_delta", "partial_json": piece}
        payload = {"type": "content_block_delta", "index": 0, "delta": delta}
        return opening + event_frame("content_block_delta", payload)

    def end(self) -> bytes:
        stop = event_frame("content_block_stop", {"type": "content_block_stop", "index": 0})
        delta = {"stop_reason": self.stop_reason(), "stop_sequence": None}
        usage = {"output_tokens": self.tokens_sent}
        stop += event_frame(
            "message_delta", {"type": "message_delta", "delta": delta, "usage": usage}
        )
        return stop + event_frame("message_stop", {"type": "message_stop"})

    def body(self) -> dict[str, Any]:
        return self._envelope() | {
            "content": [self._block(output_text(self.tokens_sent))],
            "stop_reason": self.stop_reason(),
            "usage": self.usage(),
        }

    def stop_reason(self) -> str:
        if self.request.tool is not None:
            return "tool_use"
        return "max_tokens" if self.tokens_sent >= self.request.max_tokens else "end_turn"

    def usage(self) -> dict[str, int]:
        """Anthropic counts cached prompt tokens apart: input_tokens is the rest."""
        cached = min(self.details.cached_tokens, self.request.prompt_tokens)
        return {
            "input_tokens": self.request.prompt_tokens - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": self.tokens_sent,
        }

    def _block(self, text: str) -> dict[str, Any]:
        """The answer's one content block: its text, or a call whose input holds the text
        (empty when the block opens a stream: the input follows as JSON pieces)."""
        if self.request.tool is None:
            return {"type": "text", "text": text}
        call_input = {"text": text} if text else {}
        tool_id = "toolu_" + self.request.request_id
        return {"type": "tool_use", "id": tool_id, "name": self.request.tool, "input": call_input}

    def _envelope(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.request.model,
            "stop_sequence": None,
        }


def anthropic_error(response: Response) -> Response:
    """An OpenAI-shaped refusal of the frontend, in Anthropic's shape (other answers as they
    are). The status picks the type, as Anthropic's status map has it."""
    status = response.status_code
    if status < 400 or not isinstance(response, JSONResponse):
        return response
    try:
        message = json.loads(bytes(response.body))["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = "simulated failure"
    error = {"type": ANTHROPIC_TYPES.get(status, "api_error"), "message": str(message)}
    headers = {k: v for k, v in response.headers.items() if k.startswith(("retry-after", "x-"))}
    return JSONResponse({"type": "error", "error": error}, status, headers=headers)

"""The client APIs as the measuring clients (`slo-gateway bench`, the Locust users) speak them:
the request body and path per API, and each API's streamed events read as one shape.

    chat, completions   OpenAI SSE chunks, `[DONE]` last
    responses           OpenAI Responses events: text in response.output_text.delta, usage in
                        the terminal response.completed | .incomplete | .failed
    messages            Anthropic Messages events: text in content_block_delta/text_delta,
                        prompt tokens in message_start, cumulative output tokens in
                        message_delta, message_stop last

`as_chat` turns one event into the chat-chunk shape the timers read (a content delta,
`usage` with prompt_tokens/completion_tokens, `error`) and says whether it ends the stream.
"""

from __future__ import annotations

from typing import Any, Literal

Api = Literal["chat", "completions", "responses", "messages"]
APIS: tuple[Api, ...] = ("chat", "completions", "responses", "messages")
PATHS: dict[Api, str] = {
    "chat": "/chat/completions",
    "completions": "/completions",
    "responses": "/responses",
    "messages": "/messages",
}
ANTHROPIC_VERSION = "2023-06-01"
_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


def request_body(api: Api, model: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    """A streamed request of `max_tokens` output tokens for `prompt`."""
    if api == "responses":
        return {"model": model, "input": prompt, "max_output_tokens": max_tokens, "stream": True}
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "stream": True}
    if api == "completions":
        body["prompt"] = prompt
    else:
        body["messages"] = [{"role": "user", "content": prompt}]
    if api != "messages":
        body["stream_options"] = {"include_usage": True}
    return body


def api_headers(api: Api) -> dict[str, str]:
    return {"anthropic-version": ANTHROPIC_VERSION} if api == "messages" else {}


def as_chat(api: Api, event: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """(the event as a chat chunk, whether the stream ends with it)."""
    if api == "responses":
        return _responses(event)
    if api == "messages":
        return _messages(event)
    return event, False


def _responses(event: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    kind = event.get("type")
    if kind == "response.output_text.delta":
        return _delta(event.get("delta")), False
    if kind == "error":
        return {"error": event.get("error") or event}, True
    if kind not in _TERMINAL:
        return {}, False
    response = event.get("response") or {}
    usage = response.get("usage") or {}
    chunk: dict[str, Any] = {
        "usage": {
            "prompt_tokens": usage.get("input_tokens"),
            "completion_tokens": usage.get("output_tokens"),
        }
    }
    if kind == "response.failed":
        chunk["error"] = response.get("error") or {"message": "response.failed"}
    return chunk, True


def _messages(event: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    kind = event.get("type")
    if kind == "content_block_delta":
        delta = event.get("delta") or {}
        return _delta(delta.get("text") if delta.get("type") == "text_delta" else ""), False
    if kind == "message_start":
        usage = (event.get("message") or {}).get("usage") or {}
        return {"usage": {"prompt_tokens": usage.get("input_tokens")}}, False
    if kind == "message_delta":
        usage = event.get("usage") or {}
        return {"usage": {"completion_tokens": usage.get("output_tokens")}}, False
    if kind == "error":
        return {"error": event.get("error") or event}, True
    return {}, kind == "message_stop"


def _delta(text: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": {"content": text if isinstance(text, str) else ""}}]}

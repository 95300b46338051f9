"""The OpenAI wire format as the simulated servers speak it: request parsing, bodies, SSE.

Streams follow vLLM's OpenAI server exactly: the first chat chunk carries the assistant role
and the first content token together, `finish_reason` rides on the last content chunk (or, with
`separate_finish`, on an extra empty-delta chunk as OpenAI's own API sends it),
`stream_options.include_usage` adds a final chunk with `choices: []` and `usage`, and the
stream ends with `data: [DONE]`. Output text is deterministic: token i is `token_text(i)`.

`prompt_text` renders what the engine's prefix cache hashes: chat messages through a minimal
template whose generation prompt opens the assistant turn (`<|user|>\nhi\n<|assistant|>\n`),
so a later turn that replays an answer begins with the earlier prompt followed by that answer.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.sim.tool_calls import arguments, arguments_piece, forced_tool

Kind = Literal["chat", "completion"]
DONE = b"data: [DONE]\n\n"
_WORDS = ("The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", ".")
_EMBEDDING_DIMS = 16


class InvalidBody(ValueError):
    """The request body is not a valid completion request (answered 400)."""


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    kind: Kind
    model: str
    stream: bool
    include_usage: bool
    prompt_tokens: int
    max_tokens: int
    max_tokens_given: bool
    prompt_text: str = ""
    cache_salt: str | None = None  # vLLM's per-request key for the prefix cache
    tool: str | None = None  # the function `tool_choice` forces: the answer calls it
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass(slots=True)
class PromptDetails:
    """What serving the request learnt about its prompt (usage.prompt_tokens_details)."""

    cached_tokens: int = 0


# How usage reports prompt_tokens_details: never; only when some tokens were cached (vLLM with
# --enable-prompt-tokens-details tests `num_cached_tokens` for truth); always (OpenAI).
DetailsMode = Literal["off", "nonzero", "always"]


def token_text(index: int) -> str:
    return _WORDS[index % len(_WORDS)]


def output_text(tokens: int) -> str:
    """The text of a completion's first `tokens` output tokens."""
    return "".join(token_text(i) for i in range(tokens))


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def error_body(
    message: str, error_type: str, *, code: str | int | None = None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def request_object(
    body: Any, missing_model: str = "'model' is required"
) -> tuple[dict[str, Any], str]:
    """The body as a JSON object, and its model; `missing_model` is the API's own wording."""
    if not isinstance(body, dict):
        raise InvalidBody("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidBody(missing_model)
    return body, model


def optional_positive(value: Any, name: str) -> int | None:
    """A token limit the client may leave out; a positive integer when given."""
    if value is not None and (not isinstance(value, int) or value < 1):
        raise InvalidBody(f"'{name}' must be a positive integer")
    return value


def parse_completion(body: Any, kind: Kind, *, default_max_tokens: int) -> CompletionRequest:
    body, model = request_object(body)
    max_tokens = optional_positive(
        body.get("max_completion_tokens", body.get("max_tokens")), "max_tokens"
    )
    options = body.get("stream_options") or {}
    salt = body.get("cache_salt")
    return CompletionRequest(
        kind=kind,
        model=model,
        stream=bool(body.get("stream", False)),
        include_usage=isinstance(options, dict) and bool(options.get("include_usage")),
        prompt_tokens=engine_prompt_tokens(body, kind),
        max_tokens=max_tokens or default_max_tokens,
        max_tokens_given=max_tokens is not None,
        prompt_text=prompt_text(body, kind),
        cache_salt=salt if isinstance(salt, str) and salt else None,
        tool=forced_tool(body, "chat") if kind == "chat" else None,
    )


def engine_prompt_tokens(body: dict[str, Any], kind: Kind) -> int:
    """chars/4, plus 4 per chat message for the template; token-id prompts count exactly."""
    if kind == "chat":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise InvalidBody("'messages' must be a non-empty list")
        chars = sum(len(_message_text(m)) for m in messages)
        return max(1, chars // 4 + 4 * len(messages))
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return max(1, len(prompt) // 4)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, str) for t in prompt):
        return max(1, sum(len(t) for t in prompt) // 4)
    raise InvalidBody("'prompt' must be a string, a list of strings or a list of token ids")


def prompt_text(body: dict[str, Any], kind: Kind) -> str:
    """The prompt as text: chat through the template; a token id as 4 hex digits (4 chars)."""
    if kind == "chat":
        turns = "".join(f"<|{_role(m)}|>\n{_message_text(m)}\n" for m in body["messages"])
        return turns + "<|assistant|>\n"
    prompt = body["prompt"]
    if isinstance(prompt, str):
        return prompt
    return "".join(f"{t % 65536:04x}" if isinstance(t, int) else t for t in prompt)


def _role(message: dict[str, Any]) -> str:
    role, name = message.get("role"), message.get("name")
    return f"{role}:{name}" if isinstance(name, str) and name else str(role)


def _message_text(message: Any) -> str:
    if not isinstance(message, dict):
        raise InvalidBody("each message must be an object")
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return ""


class CompletionWriter:
    """Builds the chunks and bodies of one completion."""

    def __init__(
        self,
        request: CompletionRequest,
        *,
        separate_finish: bool = False,
        details_mode: DetailsMode = "off",
    ) -> None:
        self.request = request
        self.separate_finish = separate_finish
        self.details_mode = details_mode
        self.details = PromptDetails()  # the token source fills it in while serving
        prefix = "chatcmpl-" if request.kind == "chat" else "cmpl-"
        self.id = prefix + request.request_id
        self.created = int(time.time())
        self.finish_reason = "length" if request.max_tokens_given else "stop"
        if request.tool is not None:
            self.finish_reason = "tool_calls"
        self.tokens_sent = 0

    def start(self) -> bytes:
        return b""  # chat and completions streams open with their first token

    def chunk(self, index: int) -> bytes:
        """The SSE event for output token `index` (plus the finish chunk after the last one)."""
        self.tokens_sent += 1
        last = index == self.request.max_tokens - 1
        finish = self.finish_reason if last and not self.separate_finish else None
        event = sse(self._chunk(self._delta(index, last), finish))
        if last and self.separate_finish:
            event += sse(self._chunk({} if self.request.kind == "chat" else "", self.finish_reason))
        return event

    def end(self) -> bytes:
        if not self.request.include_usage:
            return DONE
        usage_chunk = self._envelope(streaming=True) | {"choices": [], "usage": self.usage()}
        return sse(usage_chunk) + DONE

    def body(self) -> dict[str, Any]:
        text = output_text(self.tokens_sent)
        if self.request.kind == "chat":
            choice: dict[str, Any] = {"index": 0, "message": self._message(text)}
        else:
            choice = {"index": 0, "text": text}
        choice |= {"logprobs": None, "finish_reason": self.finish_reason}
        return self._envelope(streaming=False) | {"choices": [choice], "usage": self.usage()}

    def usage(self) -> dict[str, Any]:
        prompt = self.request.prompt_tokens
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "completion_tokens": self.tokens_sent,
            "total_tokens": prompt + self.tokens_sent,
        }
        cached = self.details.cached_tokens
        if self.details_mode == "always":
            usage["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}
        elif self.details_mode == "nonzero" and cached:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        return usage

    def _message(self, text: str) -> dict[str, Any]:
        if self.request.tool is None:
            return {"role": "assistant", "content": text}
        call = self._call(arguments(text)) | {"type": "function"}
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    def _delta(self, index: int, last: bool) -> dict[str, Any] | str:
        if self.request.kind == "completion":
            return token_text(index)
        if self.request.tool is not None:
            call = self._call(arguments_piece(token_text(index), index == 0, last))
            if index > 0:  # later chunks name only the call's index and the next piece
                return {"tool_calls": [{"index": 0, "function": call["function"]}]}
            call |= {"index": 0, "type": "function"}
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        if index == 0:
            return {"role": "assistant", "content": token_text(index)}
        return {"content": token_text(index)}

    def _call(self, argument_text: str) -> dict[str, Any]:
        function = {"name": self.request.tool, "arguments": argument_text}
        return {"id": "call_" + self.request.request_id, "function": function}

    def _chunk(self, delta: dict[str, Any] | str, finish: str | None) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0}
        choice |= {"delta": delta} if isinstance(delta, dict) else {"text": delta}
        choice |= {"logprobs": None, "finish_reason": finish}
        return self._envelope(streaming=True) | {"choices": [choice]}

    def _envelope(self, *, streaming: bool) -> dict[str, Any]:
        if self.request.kind == "chat":
            kind = "chat.completion.chunk" if streaming else "chat.completion"
        else:
            kind = "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.request.model}


def embeddings_body(body: Any) -> dict[str, Any]:
    """Deterministic unit vectors, one per input string."""
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        raise InvalidBody("'model' is required")
    raw = body.get("input")
    inputs = [raw] if isinstance(raw, str) else raw
    if not isinstance(inputs, list) or not inputs or not all(isinstance(i, str) for i in inputs):
        raise InvalidBody("'input' must be a string or a non-empty list of strings")
    data = [
        {"object": "embedding", "index": i, "embedding": _vector(text)}
        for i, text in enumerate(inputs)
    ]
    tokens = sum(max(1, len(text) // 4) for text in inputs)
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return {"object": "list", "data": data, "model": body["model"], "usage": usage}


def _vector(text: str) -> list[float]:
    rng = random.Random(text)
    values = [rng.uniform(-1, 1) for _ in range(_EMBEDDING_DIMS)]
    norm = sum(v * v for v in values) ** 0.5 or 1.0
    return [v / norm for v in values]


def models_body(model: str, owned_by: str, max_model_len: int | None = None) -> dict[str, Any]:
    """vLLM's /v1/models: its entry says `max_model_len`, the context window (a hosted
    provider's does not)."""
    entry: dict[str, Any] = {
        "id": model,
        "object": "model",
        "created": int(time.time()),
        "owned_by": owned_by,
    }
    if max_model_len is not None:
        entry["max_model_len"] = max_model_len
    return {"object": "list", "data": [entry]}

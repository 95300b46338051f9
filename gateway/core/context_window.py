"""Whether a request fits its model's context window, judged before sending and read after.

    needs    prompt tokens (the gateway's estimate) + max_tokens, or + 1 without max_tokens
             (vLLM refuses a request whose prompt and max_tokens exceed `max_model_len`, and
             a prompt that leaves no room for one token)
    window   of a model through an API: the largest `max_model_len` among its endpoints
             (config, else learnt from vLLM's /v1/models: gateway/watch/context_windows.py);
             unknown while any of them is unknown, so an endpoint never asked is not judged
    before   needs > window: the request does not fit (`context_fallbacks`, else a 400)
    after    an endpoint's 400 whose error says so (`overflowed`): OpenAI's code
             `context_length_exceeded`, or the wording vLLM and OpenAI share ("maximum context
             length") or Anthropic's ("prompt is too long")

The estimate can err either way: too high, a fallback the model did not need; too low, the
engine's 400, read after.
"""

from __future__ import annotations

import json

from gateway.config.settings import Api
from gateway.errors import ContextLengthExceeded
from gateway.watch.endpoints import Registry

_OVERFLOW_WORDS = ("maximum context length", "prompt is too long")


def needed_tokens(prompt_tokens: int, max_tokens: int | None) -> int:
    return prompt_tokens + (max_tokens if max_tokens is not None else 1)


def model_window(registry: Registry, model: str, api: Api) -> int | None:
    """The model's context window through `api` (None: not known for every endpoint)."""
    windows = [registry.window(e.id) for e in registry.serving(model, api)]
    if not windows or None in windows:
        return None
    return max(w for w in windows if w is not None)


def overflowed(status: int, body: bytes) -> bool:
    """Whether an upstream's answer is its refusal of a prompt too long for the model."""
    if status != 400:
        return False
    try:
        error = json.loads(body).get("error")
    except (ValueError, UnicodeDecodeError, AttributeError):
        return False
    if not isinstance(error, dict):
        return False
    if error.get("code") == "context_length_exceeded":
        return True
    message = error.get("message")
    return isinstance(message, str) and any(w in message.lower() for w in _OVERFLOW_WORDS)


def context_exceeded(model: str, needed: int, window: int | None) -> ContextLengthExceeded:
    """The client's 400 when no model of its chain fits the request."""
    size = f" of {window} tokens" if window is not None else ""
    return ContextLengthExceeded(
        f"The request does not fit the context window{size} of {model!r}: its prompt and "
        f"max_tokens need about {needed} tokens. Shorten the messages or lower max_tokens."
    )

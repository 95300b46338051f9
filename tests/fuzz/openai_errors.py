"""What every error the gateway answers must look like: OpenAI's error body."""

from __future__ import annotations

from typing import Any

ERROR_FIELDS = {"message", "type", "param", "code"}


def openai_error(status: int, content_type: str, body: Any) -> str | None:
    """Why a response is not a well-formed OpenAI error, or None when it is one."""
    if not 400 <= status < 500:
        return f"status {status} is not a client error"
    if not content_type.startswith("application/json"):
        return f"content-type {content_type!r}"
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict) or set(error) != ERROR_FIELDS:
        return f"not OpenAI's error shape: {body!r:.200}"
    if not isinstance(error["message"], str) or not error["message"]:
        return "empty message"
    if not isinstance(error["type"], str):
        return "type is not a string"
    return None

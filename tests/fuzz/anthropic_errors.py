"""What every error on the Anthropic routes must look like: Anthropic's error body."""

from __future__ import annotations

from typing import Any

from gateway.errors import ANTHROPIC_TYPES


def anthropic_error(status: int, content_type: str, body: Any) -> str | None:
    """Why a response is not a well-formed Anthropic error, or None when it is one."""
    if not 400 <= status < 500:
        return f"status {status} is not a client error"
    if not content_type.startswith("application/json"):
        return f"content-type {content_type!r}"
    if not isinstance(body, dict) or body.get("type") != "error":
        return f"not Anthropic's error shape: {body!r:.200}"
    error = body.get("error")
    if not isinstance(error, dict) or not isinstance(error.get("message"), str):
        return f"no error message: {body!r:.200}"
    if error.get("type") != ANTHROPIC_TYPES.get(status, "api_error"):
        return f"type {error.get('type')!r} for status {status}"
    return None

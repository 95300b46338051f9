"""Every error the gateway itself produces, rendered as an OpenAI error body or, on the
Anthropic routes, as an Anthropic one (the API layer picks the shape; `anthropic_body`).

    GatewayError                      -> {"error": {"message", "type", "code"}} with `status`
    ├── InvalidRequest (400)          malformed JSON, wrong types, bad parameters
    │   ├── BodyTooLarge (413)
    │   ├── ContextLengthExceeded     the prompt and max_tokens do not fit the model's context
    │   ├── ModelNotFound (404)
    │   ├── ResponseNotFound (404)    a stored response no endpoint has (or its owner lost it)
    │   ├── RecordNotFound (404)      an admin API key or tenant that does not exist
    │   ├── Conflict (409)            an admin change that clashes with what exists
    │   └── RequestTimeout (408)      the request head or body came too slowly
    ├── AuthenticationFailed (401)    missing, unknown, revoked or expired API key
    ├── PermissionDenied (403)        an SLO class, model or admin view the key may not use
    ├── Rejected (429 or 503)         admission said no: carries Retry-After and a reason
    ├── NoEndpointAvailable (503)     every candidate is unhealthy, cooling down or failed
    ├── StoreUnavailable (503)        the shared store cannot take an admin change now
    └── UpstreamError (502 / 504)     the last endpoint tried failed before the first byte

A refusal (429 or 503: admission, shedding, no endpoint) names its code in
`x-slo-gateway-reason` too.

    AttemptFailed (internal)          one endpoint failed before its first byte; the router
                                      fails over (gateway/core/failover.py) and it never reaches
                                      the client as such

Foreign errors (httpx, aiohttp, pydantic, redis) are mapped to these at the boundary that sees them.
Messages never contain provider API keys or upstream URLs with credentials.
"""

from __future__ import annotations

from typing import Any

# Anthropic's error type per HTTP status (anthropic-sdk-python types/shared/error_type.py).
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",  # the gateway's own "no capacity now" (no endpoint, shedding)
    504: "timeout_error",
    529: "overloaded_error",
}


class GatewayError(Exception):
    status: int = 500
    type: str = "server_error"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def anthropic_body(self, request_id: str | None) -> dict[str, Any]:
        """Anthropic's error shape; the status picks the type (500 and other 5xx: api_error)."""
        error_type = ANTHROPIC_TYPES.get(self.status, "api_error")
        error = {"type": error_type, "message": self.message}
        return {"type": "error", "error": error, "request_id": request_id}

    def response_headers(self) -> dict[str, str]:
        """The headers its answer carries: its own, and the reason of a refusal."""
        if self.status in (429, 503) and self.code and "x-slo-gateway-reason" not in self.headers:
            return self.headers | {"x-slo-gateway-reason": self.code}
        return self.headers


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"


class BodyTooLarge(InvalidRequest):
    status = 413


class ContextLengthExceeded(InvalidRequest):
    """The prompt plus max_tokens exceeds the model's context window (estimated, or the
    engine said so); `code` is OpenAI's `context_length_exceeded`."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="context_length_exceeded", param="messages")


class RequestTimeout(InvalidRequest):
    status = 408


class AuthenticationFailed(GatewayError):
    status = 401
    type = "invalid_request_error"


class PermissionDenied(GatewayError):
    status = 403
    type = "permission_error"


class ModelNotFound(InvalidRequest):
    status = 404


class ResponseNotFound(InvalidRequest):
    status = 404


class RecordNotFound(InvalidRequest):
    status = 404


class Conflict(InvalidRequest):
    status = 409


class Rejected(GatewayError):
    """Admission refused the request; `reason` goes out as `x-slo-gateway-reason`."""

    type = "rate_limit_error"

    def __init__(self, message: str, *, status: int, reason: str, retry_after_s: float) -> None:
        headers = {
            "retry-after": str(max(1, round(retry_after_s))),
            "x-slo-gateway-reason": reason,
        }
        super().__init__(message, code=reason, headers=headers)
        self.status = status
        self.reason = reason
        self.retry_after_s = retry_after_s


class NoEndpointAvailable(GatewayError):
    status = 503
    type = "service_unavailable"


class StoreUnavailable(GatewayError):
    status = 503
    type = "service_unavailable"


class UpstreamError(GatewayError):
    status = 502
    type = "upstream_error"


class UpstreamTimeout(UpstreamError):
    status = 504


class AttemptFailed(Exception):
    """One endpoint failed before the first byte; the next one in the ranking may be tried."""

    def __init__(
        self,
        endpoint_id: str,
        reason: str,
        *,
        status: int = 0,
        retry_after_s: float | None = None,
        quota_exhausted: bool = False,
    ) -> None:
        super().__init__(f"{endpoint_id}: {reason}")
        self.endpoint_id = endpoint_id
        self.reason = reason
        self.status = status  # 0: no answer (refused, reset, or the first-byte timeout)
        self.retry_after_s = retry_after_s
        self.quota_exhausted = quota_exhausted  # out of quota: not worth another try

"""Every error the gateway itself produces, rendered as an OpenAI error body.

    GatewayError                      -> {"error": {"message", "type", "code"}} with `status`
    ├── InvalidRequest (400)          malformed JSON, wrong types, bad parameters
    │   ├── BodyTooLarge (413)
    │   └── RequestTimeout (408)      the request head or body came too slowly
    ├── AuthenticationFailed (401)    missing or unknown API key
    ├── PermissionDenied (403)        an SLO class or admin view the key may not use
    ├── ModelNotFound (404)
    ├── Rejected (429 or 503)         admission said no: carries Retry-After and a reason
    ├── NoEndpointAvailable (503)     every candidate is unhealthy, cooling down or failed
    └── UpstreamError (502 / 504)     the last endpoint tried failed before the first byte

    AttemptFailed (internal)          one endpoint failed before its first byte; the router
                                      fails over (gateway/core/failover.py) and it never reaches
                                      the client as such

Foreign errors (httpx, aiohttp, pydantic, redis) are mapped to these at the boundary that sees them.
Messages never contain provider API keys or upstream URLs with credentials.
"""

from __future__ import annotations

from typing import Any


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


class InvalidRequest(GatewayError):
    status = 400
    type = "invalid_request_error"


class BodyTooLarge(InvalidRequest):
    status = 413


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

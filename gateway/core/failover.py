"""Failover along a ranking: when to give up, how long to wait, what the client is told.

Pure rules over `AttemptFailed`, shared by the router (live, where tenacity drives the attempts)
and the offline simulator (virtual time), so that both fail over the same way:
    next endpoint  attempt n goes to ranking[(n - 1) % len(ranking)]
    give up        after `server.max_attempts`; or when the next attempt would go back to the
                   endpoint that just failed (a one-endpoint ranking) and that endpoint is out of
                   quota or asked for a longer wait than `server.max_retry_after_s` (the client
                   then gets the Retry-After instead of a gateway that sits on its request)
    wait           none when the next endpoint is another one; else its Retry-After, or
                   RETRY_BACKOFF_S without one, capped at `server.max_retry_after_s`
    the answer     the last failure a 429 (not out of quota) -> 429 with Retry-After; no answer
                   within the first-byte timeout -> 504; anything else -> 502, with
                   `x-should-retry: false` (the gateway's own failover is used up: the openai
                   and anthropic SDKs, which retry 5xx by default, honour it)
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.config.settings import ServerConfig
from gateway.core.rate_limits import classify_error
from gateway.errors import AttemptFailed, GatewayError, Rejected, UpstreamError, UpstreamTimeout

RETRY_BACKOFF_S = 0.1  # wait before retrying the same endpoint when it gave no Retry-After
# Statuses that are the client's fault: relayed as the upstream sent them, never failed over.
CLIENT_FAULT_STATUSES = frozenset({400, 413, 422})
FIRST_BYTE_TIMEOUT = "first_byte_timeout"  # AttemptFailed.reason of an endpoint that never answered
NO_CLIENT_RETRY = {"x-should-retry": "false"}


def answered_with_error(
    endpoint_id: str, status: int, headers: Mapping[str, str], body: bytes, now: float
) -> AttemptFailed:
    """The failure an error answer (5xx, 429, 3xx) counts as, as `classify_error` reads it."""
    verdict = classify_error(status, headers, body, now=now)
    return AttemptFailed(
        endpoint_id,
        f"status_{status}",
        status=status,
        retry_after_s=verdict.cooldown_s,
        quota_exhausted=verdict.unavailable,
    )


def gives_up(
    made: int, failure: BaseException | None, next_endpoint_id: str, server: ServerConfig
) -> bool:
    """Whether to stop after `made` attempts, the last of which raised `failure`;
    `next_endpoint_id` is where attempt `made + 1` would go."""
    if made >= server.max_attempts:
        return True
    if not isinstance(failure, AttemptFailed) or next_endpoint_id != failure.endpoint_id:
        return False
    too_long = (failure.retry_after_s or 0.0) > server.max_retry_after_s
    return failure.quota_exhausted or too_long


def backoff_s(endpoints: int, failure: BaseException | None, server: ServerConfig) -> float:
    """The wait before the next attempt along a ranking of `endpoints` endpoints."""
    if endpoints > 1:
        return 0.0  # fail over at once; the next endpoint is a different one
    hinted = failure.retry_after_s if isinstance(failure, AttemptFailed) else None
    return min(server.max_retry_after_s, hinted if hinted is not None else RETRY_BACKOFF_S)


def final_error(last: AttemptFailed) -> GatewayError:
    """What the client gets when every attempt failed before the first byte."""
    if last.status == 429 and not last.quota_exhausted:
        return Rejected(
            "Every endpoint for this model is rate limited; retry later.",
            status=429,
            reason="upstream_rate_limited",
            retry_after_s=last.retry_after_s or 1.0,
        )
    if last.reason == FIRST_BYTE_TIMEOUT:
        return UpstreamTimeout(
            "No endpoint answered within the first-byte timeout.",
            code="upstream_timeout",
            headers=dict(NO_CLIENT_RETRY),
        )
    return UpstreamError(
        "Every endpoint tried for this request failed before responding.",
        code="upstream_failed",
        headers=dict(NO_CLIENT_RETRY),
    )

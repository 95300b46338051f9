"""The failover rules the router and the offline simulator share (gateway/core/failover.py)."""

from __future__ import annotations

import pytest

from gateway.config.settings import ServerConfig
from gateway.core.failover import (
    FIRST_BYTE_TIMEOUT,
    RETRY_BACKOFF_S,
    answered_with_error,
    backoff_s,
    final_error,
    gives_up,
)
from gateway.errors import AttemptFailed, Rejected, UpstreamError, UpstreamTimeout

SERVER = ServerConfig(max_attempts=3, max_retry_after_s=5.0)


def failed(
    status: int = 503, *, retry_after_s: float | None = None, quota: bool = False
) -> AttemptFailed:
    reason = f"status_{status}"
    return AttemptFailed(
        "a", reason, status=status, retry_after_s=retry_after_s, quota_exhausted=quota
    )


@pytest.mark.parametrize(
    ("made", "failure", "next_id", "expected"),
    [
        (1, failed(), "b", False),  # another endpoint next: go on
        (3, failed(), "b", True),  # max_attempts reached
        (1, failed(quota=True), "b", False),  # out of quota: skip it, try the next one
        (1, failed(quota=True), "a", True),  # ... but never the same one again
        (1, failed(429, retry_after_s=2.0), "a", False),  # a short wait on the only endpoint
        (1, failed(429, retry_after_s=30.0), "a", True),  # longer than max_retry_after_s
        (1, None, "a", False),
    ],
)
def test_gives_up(made: int, failure: AttemptFailed | None, next_id: str, expected: bool) -> None:
    assert gives_up(made, failure, next_id, SERVER) is expected


@pytest.mark.parametrize(
    ("endpoints", "failure", "expected"),
    [
        (2, failed(429, retry_after_s=2.0), 0.0),  # fail over at once
        (1, failed(429, retry_after_s=2.0), 2.0),
        (1, failed(429, retry_after_s=30.0), 5.0),  # capped
        (1, failed(), RETRY_BACKOFF_S),  # no hint
    ],
)
def test_backoff(endpoints: int, failure: AttemptFailed, expected: float) -> None:
    assert backoff_s(endpoints, failure, SERVER) == expected


def test_final_error_by_last_failure() -> None:
    limited = final_error(failed(429, retry_after_s=3.0))
    assert isinstance(limited, Rejected)
    assert (limited.status, limited.reason, limited.headers["retry-after"]) == (
        429,
        "upstream_rate_limited",
        "3",
    )
    out_of_quota = final_error(failed(429, quota=True))
    assert (type(out_of_quota), out_of_quota.status) == (UpstreamError, 502)
    timed_out = final_error(AttemptFailed("a", FIRST_BYTE_TIMEOUT))
    assert (type(timed_out), timed_out.status, timed_out.code) == (
        UpstreamTimeout,
        504,
        "upstream_timeout",
    )
    refused = final_error(AttemptFailed("a", "ClientConnectorError"))
    assert (refused.status, refused.code) == (502, "upstream_failed")


def test_an_error_answer_is_read_for_cooldown_and_quota() -> None:
    body = b'{"error": {"code": "insufficient_quota", "message": "You exceeded your quota"}}'
    quota = answered_with_error("p", 429, {}, body, now=0.0)
    assert (quota.endpoint_id, quota.status, quota.quota_exhausted) == ("p", 429, True)
    limited = answered_with_error("p", 429, {"retry-after": "7"}, b"{}", now=0.0)
    assert (limited.retry_after_s, limited.quota_exhausted) == (7.0, False)

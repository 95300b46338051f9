"""Provider signals: durations, resets, Retry-After, rate-limit headers, error verdicts."""

from __future__ import annotations

import pytest

from gateway.core.rate_limits import (
    RateLimits,
    UpstreamVerdict,
    classify_error,
    parse_duration_s,
    parse_rate_limits,
    parse_reset_s,
    parse_retry_after_s,
)

NOW = 1_717_243_200.0  # 2024-06-01T12:00:00Z


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("6m0s", 360.0),
        ("1s", 1.0),
        ("20ms", 0.02),
        ("1h2m3.5s", 3723.5),
        ("0.5s", 0.5),
        ("1m30s", 90.0),
        ("250us", 0.00025),
        ("7", 7.0),
        ("2.5", 2.5),
        ("", None),
        ("soon", None),
        ("5x", None),
        ("6m0", None),
    ],
)
def test_parses_go_durations(text: str, seconds: float | None) -> None:
    assert parse_duration_s(text) == (pytest.approx(seconds) if seconds is not None else None)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("6m0s", 360.0),
        ("2024-06-01T12:00:30Z", 30.0),
        ("2024-06-01T12:00:30+00:00", 30.0),
        ("2024-06-01T11:59:00Z", 0.0),  # already past
        (str(NOW + 12), 12.0),  # a unix time
        ("2024-13-01T00:00:00Z", None),
    ],
)
def test_parses_resets(text: str, seconds: float | None) -> None:
    assert parse_reset_s(text, now=NOW) == seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("3", 3.0),
        ("0.5", 0.5),
        ("-4", 0.0),
        ("Sat, 01 Jun 2024 12:00:20 GMT", 20.0),
        ("Sat, 01 Jun 2024 11:00:00 GMT", 0.0),
        ("tomorrow", None),
    ],
)
def test_parses_retry_after(text: str, seconds: float | None) -> None:
    assert parse_retry_after_s(text, now=NOW) == seconds


OPENAI_HEADERS = {
    "X-RateLimit-Limit-Requests": "500",
    "X-RateLimit-Remaining-Requests": "0",
    "X-RateLimit-Reset-Requests": "6m0s",
    "X-RateLimit-Limit-Tokens": "30000",
    "X-RateLimit-Remaining-Tokens": "29000",
    "X-RateLimit-Reset-Tokens": "20ms",
}
ANTHROPIC_HEADERS = {
    "anthropic-ratelimit-requests-limit": "50",
    "anthropic-ratelimit-requests-remaining": "49",
    "anthropic-ratelimit-requests-reset": "2024-06-01T12:00:01Z",
    "anthropic-ratelimit-input-tokens-limit": "40000",
    "anthropic-ratelimit-input-tokens-remaining": "0",
    "anthropic-ratelimit-input-tokens-reset": "2024-06-01T12:00:45Z",
    "anthropic-ratelimit-output-tokens-limit": "8000",
    "anthropic-ratelimit-output-tokens-remaining": "7000",
    "anthropic-ratelimit-output-tokens-reset": "2024-06-01T12:00:05Z",
    "retry-after": "45",
}


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        (OPENAI_HEADERS, RateLimits(500, 0, 360.0, 30000, 29000, 0.02)),
        (ANTHROPIC_HEADERS, RateLimits(50, 49, 1.0, 40000, 0, 45.0, retry_after_s=45.0)),
        ({"x-ratelimit-remaining-tokens": "-1", "x-ratelimit-limit-tokens": "-1"}, RateLimits()),
        ({"retry-after-ms": "1500", "retry-after": "9"}, RateLimits(retry_after_s=1.5)),
        ({"content-type": "application/json"}, RateLimits()),
    ],
)
def test_parses_rate_limit_headers(headers: dict[str, str], expected: RateLimits) -> None:
    assert parse_rate_limits(headers, now=NOW) == expected


@pytest.mark.parametrize(
    ("limits", "wait_s"),
    [
        (RateLimits(remaining_requests=0, reset_requests_s=6.0), 6.0),
        (
            RateLimits(
                remaining_requests=0, reset_requests_s=6.0, remaining_tokens=0, reset_tokens_s=20.0
            ),
            20.0,
        ),
        (RateLimits(remaining_requests=3, reset_requests_s=6.0), None),
        (RateLimits(remaining_requests=0), None),
        (RateLimits(), None),
    ],
)
def test_an_exhausted_budget_waits_for_its_reset(limits: RateLimits, wait_s: float | None) -> None:
    assert limits.exhausted_for_s() == wait_s


QUOTA_BODY = (
    b'{"error": {"message": "You exceeded your current quota", "type": "insufficient_quota",'
    b' "param": null, "code": "insufficient_quota"}}'
)
RATE_BODY = b'{"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}}'
ANTHROPIC_RATE_BODY = '{"type": "error", "error": {"type": "rate_limit_error", "message": "x"}}'


@pytest.mark.parametrize(
    ("status", "headers", "body", "verdict"),
    [
        (429, {}, QUOTA_BODY, UpstreamVerdict("quota_exhausted", False, 300.0, True)),
        (
            429,
            {"retry-after": "45"},
            QUOTA_BODY,
            UpstreamVerdict("quota_exhausted", False, 300.0, True),
        ),
        (429, {"retry-after": "7"}, RATE_BODY, UpstreamVerdict("rate_limited", True, 7.0)),
        (429, OPENAI_HEADERS, RATE_BODY, UpstreamVerdict("rate_limited", True, 360.0)),
        (429, {}, ANTHROPIC_RATE_BODY, UpstreamVerdict("rate_limited", True, 1.0)),
        (429, {}, b"<html>slow down</html>", UpstreamVerdict("rate_limited", True, 1.0)),
        (529, {"retry-after": "3"}, None, UpstreamVerdict("overloaded", True, 3.0)),
        (503, {}, b"", UpstreamVerdict("overloaded", True, None)),
        (500, {}, b"{}", UpstreamVerdict("server_error", True)),
        (0, {}, None, UpstreamVerdict("server_error", True)),
        (
            400,
            {},
            b'{"error": {"code": "context_length_exceeded"}}',
            UpstreamVerdict("client_error", False),
        ),
        (401, {}, None, UpstreamVerdict("client_error", False)),
    ],
)
def test_classifies_failed_responses(
    status: int, headers: dict[str, str], body: bytes | str | None, verdict: UpstreamVerdict
) -> None:
    assert classify_error(status, headers, body, now=NOW) == verdict

"""What a hosted provider says about its limits: rate-limit headers, Retry-After, error bodies.

Pure functions over headers (any case-insensitive or lower-case mapping) and bodies; the caller
passes `now` (unix s) to turn absolute reset times into seconds from now.

    OpenAI      x-ratelimit-{limit,remaining,reset}-{requests,tokens}; resets are Go durations
                ("6m0s", "1s", "20ms", "1h2m3.5s")
    Anthropic   anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,
                remaining,reset}; resets are RFC 3339 times; of the token families the one
                with the least remaining is reported
    both        retry-after (seconds or an HTTP date), retry-after-ms (OpenAI SDKs honour it)

A value of -1 (seen from Azure OpenAI) or one that does not parse is unknown (None).
`classify_error` turns a failed response into what the gateway should do about the endpoint:
a 429 cools it down for Retry-After (or until its exhausted budget resets), and a 429 with
`insufficient_quota` marks it unavailable and is not worth retrying there.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any, Literal

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s|us|µs|ns)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_EPOCH_MIN_S = 1e9  # a bare number this large is a unix time, not a number of seconds
_ANTHROPIC_TOKEN_FAMILIES = ("tokens", "input-tokens", "output-tokens")

ErrorKind = Literal["quota_exhausted", "rate_limited", "overloaded", "server_error", "client_error"]


@dataclass(frozen=True, slots=True)
class RateLimits:
    """A provider's budget as of one response; resets are seconds from `now`."""

    limit_requests: int | None = None
    remaining_requests: int | None = None
    reset_requests_s: float | None = None
    limit_tokens: int | None = None
    remaining_tokens: int | None = None
    reset_tokens_s: float | None = None
    retry_after_s: float | None = None

    def exhausted_for_s(self) -> float | None:
        """Seconds until an exhausted budget refills; None while budget remains (or unknown)."""
        waits = [
            reset
            for remaining, reset in (
                (self.remaining_requests, self.reset_requests_s),
                (self.remaining_tokens, self.reset_tokens_s),
            )
            if remaining == 0 and reset is not None
        ]
        return max(waits) if waits else None


@dataclass(frozen=True, slots=True)
class UpstreamVerdict:
    kind: ErrorKind
    retryable: bool  # trying this endpoint again later may succeed
    cooldown_s: float | None = None  # keep the endpoint out of rotation this long
    unavailable: bool = False  # it cannot serve until someone acts (quota, billing)


def parse_duration_s(text: str) -> float | None:
    """A Go-style duration ("6m0s", "20ms", "1h2m3.5s") or bare seconds ("1.5")."""
    text = text.strip()
    if _DURATION_PART.sub("", text) == "" and text:
        return sum(float(n) * _UNIT_S[unit] for n, unit in _DURATION_PART.findall(text))
    return _float(text)


def parse_reset_s(text: str, *, now: float) -> float | None:
    """Seconds until a reset given as a duration, an RFC 3339 time or a unix time."""
    if "T" in text:
        try:
            return max(0.0, datetime.fromisoformat(text.strip()).timestamp() - now)
        except ValueError:
            return None
    seconds = parse_duration_s(text)
    if seconds is not None and seconds >= _EPOCH_MIN_S:
        return max(0.0, seconds - now)
    return seconds


def parse_retry_after_s(text: str, *, now: float) -> float | None:
    """Retry-After: delta seconds or an HTTP date; never negative."""
    seconds = _float(text)
    if seconds is not None:
        return max(0.0, seconds)
    try:
        return max(0.0, parsedate_to_datetime(text).timestamp() - now)
    except (TypeError, ValueError):
        return None


def parse_rate_limits(headers: Mapping[str, str], *, now: float) -> RateLimits:
    h = {name.lower(): value for name, value in headers.items()}
    if any(name.startswith("anthropic-ratelimit-") for name in h):
        requests = _family(h, "anthropic-ratelimit-requests-", now)
        families = [_family(h, f"anthropic-ratelimit-{f}-", now) for f in _ANTHROPIC_TOKEN_FAMILIES]
        tokens = min(families, key=_scarcity)
    else:
        requests = _family(h, "x-ratelimit-", now, suffix="-requests")
        tokens = _family(h, "x-ratelimit-", now, suffix="-tokens")
    return RateLimits(*requests, *tokens, retry_after_s=_retry_after(h, now))


def classify_error(
    status: int,
    headers: Mapping[str, str],
    body: bytes | str | None,
    *,
    now: float,
    quota_cooldown_s: float = 300.0,
    throttle_cooldown_s: float = 1.0,
) -> UpstreamVerdict:
    """What a failed response (status 0 = no response) means for the endpoint."""
    limits = parse_rate_limits(headers, now=now)
    if status == 429 and _error_code(body) == "insufficient_quota":
        return UpstreamVerdict("quota_exhausted", False, quota_cooldown_s, unavailable=True)
    if status == 429:
        wait = limits.retry_after_s or limits.exhausted_for_s() or throttle_cooldown_s
        return UpstreamVerdict("rate_limited", True, wait)
    if status in (503, 529):
        return UpstreamVerdict("overloaded", True, limits.retry_after_s)
    if status == 0 or status >= 500:
        return UpstreamVerdict("server_error", True)
    return UpstreamVerdict("client_error", False)


_Budget = tuple[int | None, int | None, float | None]


def _family(h: Mapping[str, str], prefix: str, now: float, *, suffix: str = "") -> _Budget:
    def value(field: str) -> str | None:
        return h.get(f"{prefix}{field}{suffix}")

    reset = value("reset")
    return (
        _count(value("limit")),
        _count(value("remaining")),
        parse_reset_s(reset, now=now) if reset is not None else None,
    )


def _scarcity(budget: _Budget) -> tuple[float, float]:
    """Sort key: least remaining first, then the longest reset; unknown last."""
    _, remaining, reset = budget
    return (remaining if remaining is not None else float("inf"), -(reset or 0.0))


def _retry_after(h: Mapping[str, str], now: float) -> float | None:
    millis = _float(h.get("retry-after-ms", ""))
    if millis is not None:
        return max(0.0, millis / 1000)
    value = h.get("retry-after")
    return parse_retry_after_s(value, now=now) if value is not None else None


def _error_code(body: bytes | str | None) -> str | None:
    """`error.code` (OpenAI) or `error.type` (Anthropic) of an error body, if any."""
    if not body:
        return None
    try:
        parsed: Any = json.loads(body)
    except ValueError:
        return None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(error, dict):
        return None
    code = error.get("code") or error.get("type")
    return code if isinstance(code, str) else None


def _count(text: str | None) -> int | None:
    number = _float(text or "")
    return int(number) if number is not None and number >= 0 else None


def _float(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None

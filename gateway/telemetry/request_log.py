"""Structured request logs: one JSON line per API request, written when the request ends.

The line is built from the request's record (gateway/telemetry/record.py) with one
`orjson.dumps`, and goes
to the `slo_gateway.requests` logger, which writes bare lines to stdout. Nothing is logged per
chunk. Every line has the same keys (null when unknown):

    time            ISO 8601, UTC, when the request ended
    request_id      the x-request-id the client sent or the gateway made
    method, path    e.g. POST /v1/chat/completions
    status          the HTTP status the client got (499: it left before the first byte)
    outcome         ok, client_error, rejected, upstream_error, cancelled, error
    error_code      the error code the client got (e.g. saturated, invalid_value): a
                    refusal's reason on every API; other errors on the Anthropic routes,
                    whose bodies have no code, give their type
    tenant, slo_class, model, stream
    requested_model, fallback  the model asked for and why another served it (unavailable,
                    refused, context), when a fallback did (gateway/core/fallback_chain.py)
    endpoint        the last endpoint tried; attempts: how many were tried
    decision        the policy's reason (slo_met, slo_at_risk, explore, rotation, ...), or
                    admission's (best_effort: docs/slo-guide.md, section 6c)
    predicted_ttft_ms, queued_ms
    ttft_ms, tpot_ms, prompt_tokens, output_tokens, slo_met, duration_ms
    cached_tokens   of prompt_tokens, read from the provider's prompt cache
    cost_usd        at the answering endpoint's prices (docs/operations.md "Usage")

Keys never appear: the record holds none, and upstream error bodies are reduced to their code.
Prompt text is added (as `prompt`) only with GATEWAY_LOG_PROMPTS=true, a debugging aid.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from datetime import UTC, datetime
from typing import Any

import orjson

from gateway.telemetry.record import RequestRecord
from policies.admission import Reason

request_log = logging.getLogger("slo_gateway.requests")
# Refusals: admission's reasons, plus a provider's rate limit passed on and no endpoint at all.
ADMISSION_CODES = frozenset(
    {r.value for r in Reason}
    | {"upstream_rate_limited", "no_endpoint_available", "no_endpoint", "owner_unavailable"}
)
_PROMPT_FIELDS = ("messages", "prompt", "input")
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str)


_stdout = logging.StreamHandler(sys.stdout)
_stdout.setFormatter(logging.Formatter("%(message)s"))
_ONLY_STDOUT = [_stdout]
_flush_on: asyncio.AbstractEventLoop | None = None  # the loop a flush is scheduled on


def configure() -> None:
    """Bare JSON lines on stdout, whatever the root logger does; safe to call again."""
    if _stdout not in request_log.handlers:
        request_log.addHandler(_stdout)
    request_log.setLevel(logging.INFO)
    request_log.propagate = False


def emit(record: RequestRecord, *, prompts: bool = False) -> None:
    """Straight to the logger's handlers: `Logger.info` would also walk the stack to find its
    caller, which no line uses (a third of the cost of logging a request). With only stdout to
    write to (the usual case), not even that: see `_write`."""
    if request_log.isEnabledFor(logging.INFO):
        text = log_line(record, prompts=prompts)
        if request_log.handlers == _ONLY_STDOUT and not request_log.filters:
            _write(text)
        else:
            request_log.handle(
                logging.LogRecord(request_log.name, logging.INFO, "", 0, text, None, None)
            )


def _write(text: str) -> None:
    """The line as `_stdout` would write it, without a LogRecord, a formatter, the handler's
    lock (the event loop is the only writer of request lines) or a flush per line: one flush
    per event-loop iteration serves every line written in it, still before the loop waits.
    The pending flush is remembered by its loop: one that closed first never ran it."""
    global _flush_on
    _stdout.stream.write(text + "\n")
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # no loop: nothing to batch with
        _stdout.flush()
        return
    if _flush_on is not loop:
        loop.call_soon(_flush)
        _flush_on = loop


def _flush() -> None:
    global _flush_on
    _flush_on = None
    _stdout.flush()


def log_line(record: RequestRecord, *, prompts: bool = False) -> str:
    fields = _request_fields(record) | _result_fields(record)
    if prompts and record.body is not None:
        fields["prompt"] = next((record.body[k] for k in _PROMPT_FIELDS if k in record.body), None)
    try:
        return orjson.dumps(fields, default=str).decode()
    except TypeError:  # an integer beyond 64 bits in a logged prompt
        return _ENCODER.encode(fields)


def _request_fields(record: RequestRecord) -> dict[str, Any]:
    route, ranking = record.route, record.ranking
    return {
        "time": _timestamp(time.time()),
        "request_id": record.request_id,
        "method": record.method,
        "path": record.path,
        "status": record.status,
        "outcome": outcome(record),
        "error_code": record.error_code,
        "tenant": record.tenant,
        "slo_class": route.slo.name if route else None,
        "model": route.model if route else None,
        "requested_model": record.requested_model,
        "fallback": record.fallback_reason,
        "stream": route.stream if route else None,
        "endpoint": record.endpoint_id,
        "attempts": record.attempts,
        "decision": (ranking.reason or None) if ranking else None,
        "predicted_ttft_ms": _ms(ranking.predicted_ttft_s) if ranking else None,
        "queued_ms": _ms(record.queued_s) if ranking else None,
    }


def _result_fields(record: RequestRecord) -> dict[str, Any]:
    result, route = record.result, record.route
    return {
        "ttft_ms": _ms(result.ttft_s) if result else None,
        "tpot_ms": _ms(result.tpot_s) if result else None,
        "prompt_tokens": result.prompt_tokens if result else (route and route.prompt_tokens),
        "output_tokens": result.output_tokens if result else None,
        "cached_tokens": result.cached_tokens if result else None,
        "cost_usd": record.cost_pusd / 1e12 if result else None,
        "slo_met": record.slo_met,
        "duration_ms": _ms(time.perf_counter() - record.started_s),
    }


def outcome(record: RequestRecord) -> str:
    """The finisher's outcome when an upstream answered; otherwise read from the status."""
    if record.result is not None:
        return record.result.outcome
    status = record.status
    if status < 400:
        return "ok"  # answered by the gateway itself (GET /v1/models, a stored response)
    if status == 499:
        return "cancelled"
    if record.error_code in ADMISSION_CODES:
        return "rejected"
    if status in (502, 504):
        return "upstream_error"
    return "client_error" if 400 <= status < 500 else "error"


def error_code(body: bytes, status: int) -> str:
    """The `error.code` of an OpenAI error body (an Anthropic one's `error.type`), else
    `http_<status>`."""
    try:
        parsed = json.loads(body) if body else None
    except (ValueError, UnicodeDecodeError):
        parsed = None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("error"), dict):
        return f"http_{status}"
    error = parsed["error"]
    code = error.get("code") or (error.get("type") if parsed.get("type") == "error" else None)
    return code if isinstance(code, str) and code else f"http_{status}"


def _timestamp(now: float) -> str:
    """ISO 8601 with milliseconds, as `isoformat(timespec="milliseconds")` writes it; the part
    up to the second is formatted once a second."""
    global _second
    whole = int(now)
    if whole != _second[0]:
        _second = (whole, datetime.fromtimestamp(whole, UTC).strftime("%Y-%m-%dT%H:%M:%S"))
    return f"{_second[1]}.{int((now - whole) * 1000):03d}+00:00"


_second: tuple[int, str] = (-1, "")


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e3, 2)

"""The request log line: its shape, its outcome rules, and what it must never contain; the
request counter it shares its outcome with; uvicorn's access lines without query strings."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from gateway.telemetry import access_log, request_log
from gateway.telemetry.access_log import WithoutQuery
from gateway.telemetry.metrics import Metrics
from gateway.telemetry.record import Finished, RequestRecord
from gateway.telemetry.request_log import error_code, log_line, outcome
from policies.base import Ranking, RouteRequest, SloTarget

SLO = SloTarget(name="interactive", ttft_s=0.5)
ROUTE = RouteRequest("r1", "llama", "acme", SLO, prompt_tokens=120, max_tokens=16, stream=True)
BODY = {"model": "llama", "messages": [{"role": "user", "content": "top secret plan"}]}


DONE = Finished("ok", 200, prompt_tokens=118, output_tokens=16, ttft_s=0.2, tpot_s=0.02, e2e_s=0.5)


def finished(**changes: Any) -> Finished:
    return DONE._replace(**changes)


def served() -> RequestRecord:
    record = RequestRecord("r1", "POST", "/v1/chat/completions", time.perf_counter(), status=200)
    record.route, record.tenant, record.body = ROUTE, "acme", BODY
    record.ranking = Ranking(endpoints=(), predicted_ttft_s=0.15, reason="slo_met")
    record.endpoint_id, record.attempts, record.result = "vllm-a", 1, finished()
    record.slo_met = True
    return record


def test_a_served_request_is_one_line_with_every_field() -> None:
    text = log_line(served())
    assert "\n" not in text
    entry = json.loads(text)
    assert entry["request_id"] == "r1" and entry["status"] == 200 and entry["outcome"] == "ok"
    assert (entry["tenant"], entry["slo_class"], entry["model"]) == ("acme", "interactive", "llama")
    assert (entry["endpoint"], entry["attempts"], entry["decision"]) == ("vllm-a", 1, "slo_met")
    assert entry["ttft_ms"] == 200.0 and entry["tpot_ms"] == 20.0
    assert entry["predicted_ttft_ms"] == 150.0
    assert (entry["prompt_tokens"], entry["output_tokens"]) == (118, 16)
    assert entry["slo_met"] is True and entry["duration_ms"] >= 0
    assert entry["time"].endswith("+00:00")


def test_a_fallbacks_line_names_the_model_asked_for_and_why() -> None:
    record = served()
    record.requested_model, record.fallback_reason = "llama-70b", "refused"
    entry = json.loads(log_line(record))
    assert (entry["model"], entry["requested_model"], entry["fallback"]) == (
        "llama",
        "llama-70b",
        "refused",
    )
    assert json.loads(log_line(served()))["fallback"] is None


def test_the_line_keeps_its_keys_when_nothing_is_known() -> None:
    bare = RequestRecord("r2", "POST", "/v1/chat/completions", time.perf_counter(), status=401)
    bare.error_code = "invalid_api_key"
    assert set(json.loads(log_line(bare))) == set(json.loads(log_line(served())))


def test_prompt_text_appears_only_when_asked() -> None:
    assert "top secret" not in log_line(served())
    entry = json.loads(log_line(served(), prompts=True))
    assert entry["prompt"] == BODY["messages"]


def test_the_line_carries_the_records_verdict() -> None:
    record = served()
    record.result, record.slo_met = finished(ttft_s=0.9), False
    assert json.loads(log_line(record))["slo_met"] is False
    record.slo_met = None  # the client left: not judged
    assert json.loads(log_line(record))["slo_met"] is None


def test_outcome_without_an_upstream_answer_comes_from_status_and_code() -> None:
    def of(status: int, code: str | None) -> str:
        record = RequestRecord("r", "POST", "/v1/x", 0.0, status=status, error_code=code)
        return outcome(record)

    assert of(429, "saturated") == "rejected"
    assert of(503, "queue_full") == "rejected"
    assert of(503, "no_endpoint_available") == "rejected"
    assert of(502, "upstream_failed") == "upstream_error"
    assert of(400, "invalid_value") == "client_error"
    assert of(499, None) == "cancelled"
    assert of(500, "internal_error") == "error"
    assert of(503, "owner_unavailable") == "rejected"
    assert of(200, None) == "ok"  # answered by the gateway itself: GET /v1/models, not an error


def test_error_code_reads_openai_error_bodies_only() -> None:
    body = json.dumps({"error": {"message": "sk-123 leaked?", "code": "saturated"}}).encode()
    assert error_code(body, 429) == "saturated"
    assert error_code(b'{"object": "error", "code": 400}', 400) == "http_400"
    assert error_code(b"not json", 502) == "http_502"
    assert error_code(b"", 500) == "http_500"
    anthropic = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    assert error_code(json.dumps(anthropic).encode(), 503) == "overloaded_error"


class Flushes(io.StringIO):
    """A stdout that records what had been written each time it was flushed."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed: list[str] = []

    def flush(self) -> None:
        self.flushed.append(self.getvalue())


@pytest.fixture
def stdout_only() -> Iterator[Flushes]:
    """The request logger as the gateway configures it, over a stream that records flushes,
    whatever other tests did to the logger."""
    logger = request_log.request_log
    saved = (logger.handlers[:], logger.filters[:], logger.level, logger.disabled)
    logger.handlers, logger.filters, logger.disabled = [], [], False
    stream = Flushes()
    previous = request_log._stdout.setStream(stream)
    request_log.configure()
    try:
        yield stream
    finally:
        request_log._stdout.setStream(previous)
        logger.handlers, logger.filters, logger.level, logger.disabled = saved


def only_stdout() -> None:
    """pytest attaches its log capture to loggers once the test runs: take it off again."""
    request_log.request_log.handlers = [request_log._stdout]


async def test_lines_written_in_one_loop_iteration_share_one_flush(stdout_only: Flushes) -> None:
    stream = stdout_only
    only_stdout()
    request_log.emit(served())
    request_log.emit(served())
    assert stream.flushed == []
    await asyncio.sleep(0)
    lines = stream.getvalue().splitlines()
    assert [json.loads(text)["request_id"] for text in lines] == ["r1", "r1"]
    assert stream.flushed == [stream.getvalue()]


def test_the_time_is_iso_8601_utc_with_milliseconds() -> None:
    for now in (1_700_000_000.0, 1_700_000_000.5, 1_700_000_059.999, time.time()):
        expected = datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds")
        assert request_log._timestamp(now) == expected


def test_a_flush_left_pending_by_a_closed_loop_does_not_stop_later_ones(
    stdout_only: Flushes,
) -> None:
    async def log_one() -> None:
        request_log.emit(served())

    only_stdout()
    asyncio.run(log_one())  # closes its loop, maybe before the flush ran
    flushed = len(stdout_only.flushed)

    async def log_and_wait() -> None:
        request_log.emit(served())
        await asyncio.sleep(0)

    asyncio.run(log_and_wait())
    assert len(stdout_only.flushed) > flushed
    assert stdout_only.flushed[-1] == stdout_only.getvalue()


def access_record(target: str) -> logging.LogRecord:
    args = ("127.0.0.1:5000", "GET", target, "1.1", 401)
    return logging.LogRecord("uvicorn.access", logging.INFO, "", 0, ACCESS_FORMAT, args, None)


ACCESS_FORMAT = '%s - "%s %s HTTP/%s" %d'  # what uvicorn logs per response


def test_uvicorns_access_lines_lose_their_query_strings() -> None:
    record = access_record("/dashboard?key=sk-test-admin&x=1")
    assert WithoutQuery().filter(record)
    assert record.getMessage() == '127.0.0.1:5000 - "GET /dashboard HTTP/1.1" 401'
    plain = access_record("/v1/models")
    assert WithoutQuery().filter(plain) and plain.getMessage().endswith(
        '"GET /v1/models HTTP/1.1" 401'
    )


def test_the_query_filter_is_installed_once() -> None:
    access_log.strip_queries()
    access_log.strip_queries()
    logger = logging.getLogger(access_log.ACCESS_LOGGER)
    assert sum(isinstance(f, WithoutQuery) for f in logger.filters) == 1


def test_every_request_is_counted_once_with_its_outcome_and_reason() -> None:
    metrics = Metrics()
    refused = RequestRecord("r2", "POST", "/v1/chat/completions", 0.0, status=429)
    refused.route, refused.tenant, refused.error_code = ROUTE, "acme", "tenant_rate_limited"
    unknown = RequestRecord("r3", "POST", "/v1/chat/completions", 0.0, status=401)
    for record in (served(), refused, unknown):
        metrics.count_request(record, outcome(record))
    counts = {
        tuple(s.labels.values()): s.value
        for s in next(iter(metrics.requests.collect())).samples
        if s.name.endswith("_total")
    }
    assert counts == {
        ("llama", "vllm-a", "acme", "interactive", "ok", ""): 1,
        ("llama", "", "acme", "interactive", "rejected", "tenant_rate_limited"): 1,
        ("", "", "", "", "client_error", ""): 1,
    }

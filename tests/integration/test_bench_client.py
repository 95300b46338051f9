"""The measuring client on a real socket, against a scripted SSE server with known timings."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gateway.bench.sweep import Level, SweepPlan, run_level
from gateway.bench.sweep_client import Target, endpoint_url, make_client, measure_request
from gateway.bench.sweep_report import summarize_level
from tests.fixtures.servers import serve_app

pytestmark = pytest.mark.integration

TTFT_S = 0.2
ITL_S = 0.03
TOKENS = 6


def _sse(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


def _delta(**delta: str) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}


def scripted_app(*, usage: bool = True, status: int = 200) -> Starlette:
    """Role delta at once (as a buffering gateway might), first token after TTFT_S, then ITL_S."""

    async def events(include_usage: bool) -> AsyncIterator[bytes]:
        yield _sse(_delta(role="assistant", content=""))
        await asyncio.sleep(TTFT_S)
        for i in range(TOKENS):
            if i:
                await asyncio.sleep(ITL_S)
            yield _sse(_delta(content=f"w{i} "))
        if usage and include_usage:
            counts = {"prompt_tokens": 9, "completion_tokens": TOKENS, "total_tokens": 9 + TOKENS}
            yield _sse({"choices": [], "usage": counts})
        yield b"data: [DONE]\n\n"

    async def chat(request: Request) -> Response:
        body = await request.json()
        if status != 200:
            error = {"message": "overloaded", "type": "server_error", "code": None}
            return JSONResponse({"error": error}, status_code=status)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return StreamingResponse(events(include_usage), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


async def _measure_once(app: Starlette) -> Any:
    async with serve_app(app) as base_url, make_client(timeout_s=10, max_connections=4) as client:
        target = Target(endpoint_url(base_url, "chat"), "m")
        return await measure_request(client, target, "hello there", max_tokens=TOKENS)


async def test_times_first_content_token_not_the_early_role_delta() -> None:
    m = await _measure_once(scripted_app())
    assert m.ok, m.error
    assert TTFT_S <= m.ttft_s < TTFT_S + 0.15
    assert m.output_tokens == TOKENS and not m.tokens_counted
    assert len(m.itl_s) == TOKENS - 1
    assert ITL_S * 0.8 <= m.tpot_s < ITL_S * 2
    assert m.e2e_s >= m.ttft_s + (TOKENS - 1) * ITL_S * 0.8


async def test_counts_deltas_when_the_server_sends_no_usage() -> None:
    m = await _measure_once(scripted_app(usage=False))
    assert m.ok and m.tokens_counted and m.output_tokens == TOKENS


async def test_http_error_is_recorded_not_raised() -> None:
    m = await _measure_once(scripted_app(status=503))
    assert not m.ok and m.status == 503
    assert m.error is not None and m.error.startswith("HTTP 503") and "overloaded" in m.error


async def test_connection_refused_is_recorded_not_raised() -> None:
    async with make_client(timeout_s=2, max_connections=1) as client:
        target = Target("http://127.0.0.1:9/v1/chat/completions", "m")
        m = await measure_request(client, target, "hi", max_tokens=2)
    assert not m.ok and m.status is None and m.error


async def test_sixteen_concurrent_streams_do_not_inflate_ttft() -> None:
    plan = SweepPlan(requests_per_level=16, output_tokens=TOKENS)
    client = make_client(timeout_s=10, max_connections=16)
    async with serve_app(scripted_app()) as base_url, client:
        target = Target(endpoint_url(base_url, "chat"), "m")
        run = await run_level(client, target, plan, Level(32, 16))
    summary = summarize_level(run)
    assert summary.failed == 0 and summary.requests == 16
    assert summary.ttft_s.p50 is not None and summary.ttft_s.p50 < TTFT_S + 0.1
    # one wave of 16 parallel streams: the level takes about one request's time, not 16
    assert run.wall_s < 3 * (TTFT_S + TOKENS * ITL_S)


async def test_duration_mode_stops_sending_at_the_deadline_and_keeps_in_flight() -> None:
    plan = SweepPlan(duration_s=0.5, output_tokens=TOKENS)  # one request takes about 0.35 s
    client = make_client(timeout_s=10, max_connections=2)
    async with serve_app(scripted_app()) as base_url, client:
        target = Target(endpoint_url(base_url, "chat"), "m")
        run = await run_level(client, target, plan, Level(32, 2))
    assert len(run.records) == 4  # two rounds of two workers
    assert all(r.sent_at_s < 0.5 and r.measurement.ok for r in run.records)
    assert run.wall_s > 0.5  # the second round finished after the deadline and was kept

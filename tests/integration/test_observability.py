"""Request logs and traces end to end: a gateway on loopback in front of real upstream servers."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from gateway.config.settings import Settings
from gateway.telemetry import request_log, tracing
from tests.fixtures.gateway import (
    ADMIN_KEY,
    ENGINE_MODEL,
    OTHER_TENANT_KEY,
    PROVIDER_KEY,
    PUBLIC_MODEL,
    TENANT_KEY,
    Fleet,
    chat_body,
    engine,
    fleet_config,
    fleet_gateway,
    member,
    provider,
    tenants_with,
)
from tests.fixtures.processes import GatewayProcess
from tests.fixtures.servers import UvicornThread

pytestmark = pytest.mark.integration
ACME = {"authorization": f"Bearer {TENANT_KEY}"}
ZETA = {"authorization": f"Bearer {OTHER_TENANT_KEY}"}
PROMPT = "the quick brown fox recites a confidential prompt"


class Collected(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def log_lines() -> Iterator[list[str]]:
    handler = Collected()
    request_log.request_log.addHandler(handler)
    try:
        yield handler.lines
    finally:
        request_log.request_log.removeHandler(handler)


def eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def post(base_url: str, body: dict[str, Any], headers: dict[str, str], rid: str) -> httpx.Response:
    return httpx.post(
        base_url + "/v1/chat/completions",
        json=body,
        headers=headers | {"x-request-id": rid},
        timeout=30,
    )


def by_request(lines: list[str]) -> dict[str, dict[str, Any]]:
    parsed = [json.loads(line) for line in lines]
    return {entry["request_id"]: entry for entry in parsed}


def test_one_json_line_per_request_with_outcome_and_no_secrets(log_lines: list[str]) -> None:
    members: Fleet = {"vllm-1": engine(), "hosted": provider()}
    zeta_limited = tenants_with(zeta={"limits": {"requests_per_min": 1}})
    with fleet_gateway(members, tenants=zeta_limited) as (gateway, _):
        url = gateway.base_url
        stream = chat_body(PROMPT, stream=True, max_tokens=6)
        assert post(url, stream, ACME, "r-stream").status_code == 200
        assert post(url, chat_body(PROMPT, max_tokens=4), ACME, "r-plain").status_code == 200
        assert post(url, chat_body(PROMPT), ZETA, "r-zeta-1").status_code == 200
        assert post(url, chat_body(PROMPT), ZETA, "r-zeta-2").status_code == 429
        assert post(url, {"model": PUBLIC_MODEL}, ACME, "r-invalid").status_code == 400
        assert post(url, chat_body(PROMPT), {}, "r-nokey").status_code == 401
        missing = chat_body(PROMPT, model="no-such-model")
        assert post(url, missing, ACME, "r-missing").status_code == 404
        eventually(lambda: len(log_lines) >= 7)
    lines = by_request(log_lines)
    assert len(log_lines) == 7 and len(lines) == 7

    ok = lines["r-stream"]
    assert (ok["status"], ok["outcome"], ok["tenant"], ok["slo_class"]) == (
        200,
        "ok",
        "acme",
        "interactive",
    )
    assert ok["endpoint"] in {"vllm-1", "hosted"} and ok["attempts"] == 1
    assert ok["decision"] == "rotation" and ok["stream"] is True
    assert ok["ttft_ms"] > 0 and ok["tpot_ms"] > 0 and ok["output_tokens"] == 6
    assert ok["slo_met"] is True and ok["duration_ms"] >= ok["ttft_ms"]
    assert lines["r-plain"]["outcome"] == "ok" and lines["r-plain"]["ttft_ms"] is None

    shed = lines["r-zeta-2"]
    assert (shed["status"], shed["outcome"], shed["error_code"]) == (
        429,
        "rejected",
        "tenant_rate_limited",
    )
    assert shed["tenant"] == "zeta" and shed["slo_class"] == "batch" and shed["endpoint"] is None
    invalid = lines["r-invalid"]
    assert (invalid["outcome"], invalid["error_code"], invalid["tenant"]) == (
        "client_error",
        "invalid_value",
        "acme",
    )
    assert lines["r-nokey"]["error_code"] == "missing_api_key"
    assert lines["r-nokey"]["tenant"] is None
    assert lines["r-missing"]["error_code"] == "model_not_found"

    everything = "\n".join(log_lines)
    for secret in (TENANT_KEY, OTHER_TENANT_KEY, PROVIDER_KEY, ADMIN_KEY, "confidential"):
        assert secret not in everything
    assert all("prompt" not in entry for entry in lines.values())


def test_prompt_text_is_logged_only_when_the_debug_flag_asks(log_lines: list[str]) -> None:
    with fleet_gateway({"vllm-1": engine()}, Settings(log_prompts=True)) as (gateway, _):
        post(gateway.base_url, chat_body(PROMPT, max_tokens=2), ACME, "r-debug")
        eventually(lambda: len(log_lines) >= 1)
    entry = json.loads(log_lines[0])
    assert entry["prompt"] == [{"role": "user", "content": PROMPT}]
    assert TENANT_KEY not in log_lines[0]


def test_no_log_line_when_request_logs_are_off(log_lines: list[str]) -> None:
    with fleet_gateway({"vllm-1": engine()}, Settings(request_log=False)) as (gateway, _):
        assert post(gateway.base_url, chat_body("hi"), ACME, "r-quiet").status_code == 200
        time.sleep(0.2)
    assert log_lines == []


# --- traces ------------------------------------------------------------------------------


class Recorder:
    """An upstream that streams three tokens and remembers the headers it was sent."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/health", lambda _: PlainTextResponse("ok")),
                Route("/metrics", lambda _: PlainTextResponse("")),
            ]
        )

    async def chat(self, request: Request) -> Response:
        self.headers.append(dict(request.headers))
        body = await request.json()
        if not body.get("stream"):
            usage = {"prompt_tokens": 5, "completion_tokens": 3}
            return JSONResponse({"choices": [{"message": {"content": "a b c"}}], "usage": usage})
        return StreamingResponse(self.events(), media_type="text/event-stream")

    async def events(self) -> AsyncIterator[bytes]:
        for word in ("a", "b", "c"):
            await asyncio.sleep(0.01)
            chunk = {"choices": [{"index": 0, "delta": {"content": word}}]}
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}
        yield f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode()


@pytest.fixture
def spans() -> Iterator[Any]:
    pytest.importorskip(
        "opentelemetry.sdk", reason="the otel extra is missing: pip install -e '.[otel]'"
    )
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield exporter
    finally:
        tracing.install(None)
        provider.shutdown()


@pytest.fixture
def recorder() -> Iterator[tuple[Recorder, str]]:
    upstream = Recorder()
    with UvicornThread(upstream.app) as server:
        yield upstream, server.base_url


SLO_AWARE = {"name": "slo_aware", "explore_fraction": 0.0}
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"


def test_a_request_is_one_trace_with_admission_routing_and_upstream_spans(
    spans: Any, recorder: tuple[Recorder, str]
) -> None:
    upstream, upstream_url = recorder
    caller = {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}
    with fleet_gateway({"rec": upstream_url}, policy=SLO_AWARE) as (gateway, _):
        body = chat_body(PROMPT, stream=True, max_tokens=3)
        response = post(gateway.base_url, body, ACME | caller, "r-traced")
        assert response.status_code == 200 and "[DONE]" in response.text
        eventually(lambda: any(s.name.startswith("POST ") for s in spans.get_finished_spans()))
    finished = {s.name: s for s in spans.get_finished_spans()}
    root = finished["POST /v1/chat/completions"]
    upstream_span = finished[f"chat {ENGINE_MODEL}"]
    assert {"tenant_limits", "admission", "routing"} <= set(finished)  # each named once
    assert len(spans.get_finished_spans()) == len(finished)

    trace_id = root.context.trace_id
    assert f"{trace_id:032x}" == CALLER_TRACE and f"{root.parent.span_id:016x}" == CALLER_SPAN
    for child in ("tenant_limits", "admission", f"chat {ENGINE_MODEL}"):
        assert finished[child].context.trace_id == trace_id
        assert finished[child].parent.span_id == root.context.span_id
    # admission judges the request by the policy's ranking (policies/admission.py)
    assert finished["routing"].parent.span_id == finished["admission"].context.span_id
    sent = upstream.headers[-1]["traceparent"]
    assert sent == f"00-{trace_id:032x}-{upstream_span.context.span_id:016x}-01"

    attributes = root.attributes
    assert attributes["slo_gateway.tenant"] == "acme"
    assert attributes["slo_gateway.slo_class"] == "interactive"
    assert attributes["slo_gateway.endpoint"] == "rec"
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == PUBLIC_MODEL
    assert attributes["gen_ai.usage.input_tokens"] == 5
    assert attributes["gen_ai.usage.output_tokens"] == 3
    assert 0 < attributes["gen_ai.server.time_to_first_token"] < 5
    assert attributes["slo_gateway.predicted.time_to_first_token"] > 0
    assert attributes["slo_gateway.decision.reason"] in {"slo_met", "slo_at_risk", "cold"}
    assert attributes["http.response.status_code"] == 200
    assert upstream_span.attributes["gen_ai.request.model"] == ENGINE_MODEL
    assert upstream_span.attributes["gen_ai.provider.name"] == "vllm"
    assert upstream_span.end_time >= finished["routing"].end_time


def test_a_failed_attempt_is_its_own_span_marked_as_an_error(
    spans: Any, recorder: tuple[Recorder, str]
) -> None:
    _, upstream_url = recorder
    members: Fleet = {
        "broken": engine(faults={"status_code": 503}),
        "rec": member(upstream_url, price={"input_per_1m": 1.0}),  # so "broken" is tried first
    }
    with fleet_gateway(members, policy={"name": "cost_first"}) as (gateway, _):
        response = post(gateway.base_url, chat_body(PROMPT, max_tokens=3), ACME, "r-fail")
        assert response.status_code == 200
        eventually(lambda: any(s.name.startswith("POST ") for s in spans.get_finished_spans()))
    upstreams = [s for s in spans.get_finished_spans() if s.name == f"chat {ENGINE_MODEL}"]
    failed = [s for s in upstreams if s.attributes["slo_gateway.endpoint"] == "broken"]
    answered = [s for s in upstreams if s.attributes["slo_gateway.endpoint"] == "rec"]
    assert len(failed) == 1 and len(answered) == 1
    assert failed[0].attributes["error.type"] == "status_503"
    assert failed[0].status.status_code.name == "ERROR"
    root = next(s for s in spans.get_finished_spans() if s.name.startswith("POST "))
    assert root.attributes["slo_gateway.attempts"] == 2


def test_no_traceparent_goes_upstream_when_tracing_is_off(recorder: tuple[Recorder, str]) -> None:
    upstream, upstream_url = recorder
    assert not tracing.enabled()
    with fleet_gateway({"rec": upstream_url}) as (gateway, _):
        assert post(gateway.base_url, chat_body(PROMPT), ACME, "r-off").status_code == 200
    assert "traceparent" not in upstream.headers[-1]


def test_standard_otel_variables_turn_tracing_on_in_a_served_gateway(tmp_path: Path) -> None:
    pytest.importorskip(
        "opentelemetry.exporter.otlp.proto.http",
        reason="the otel extra is missing: pip install -e '.[otel]'",
    )
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    exported: list[str] = []

    async def receive(request: Request) -> Response:
        batch = ExportTraceServiceRequest.FromString(await request.body())
        for resource_spans in batch.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                exported.extend(span.name for span in scope_spans.spans)
        return Response(b"", media_type="application/x-protobuf")

    collector = Starlette(routes=[Route("/v1/traces", receive, methods=["POST"])])
    with UvicornThread(collector) as otlp, fleet_config({"vllm-1": engine()}) as (data, _):
        otel = {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.base_url, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        with GatewayProcess(data, tmp_path, **otel) as gateway:
            body = chat_body(PROMPT, stream=True, max_tokens=2)
            assert post(gateway.base_url, body, ACME, "r-otlp").status_code == 200
            eventually(lambda: "POST /v1/chat/completions" in exported, timeout_s=20)
    assert {"admission", "routing", f"chat {ENGINE_MODEL}"} <= set(exported)

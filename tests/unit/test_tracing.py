"""Tracing switches on only from the standard OTEL_* environment, and costs nothing when off."""

from __future__ import annotations

import pytest

from gateway.telemetry import tracing
from gateway.telemetry.record import Finished, RequestRecord
from policies.base import Ranking, RouteRequest, SloTarget


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_SERVICE_NAME": "gw"}, False),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_SDK_DISABLED": "false"}, True),
        ({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, False),
        ({"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False),
    ],
)
def test_wanted_only_when_the_environment_asks(environ: dict[str, str], on: bool) -> None:
    assert tracing.wanted(environ) is on


def test_configure_stays_off_without_otel_variables() -> None:
    assert tracing.configure({}) is False
    assert not tracing.enabled()


def test_off_means_no_spans_and_no_headers() -> None:
    assert not tracing.enabled()
    assert tracing.span("routing") is tracing.span("admission")  # one shared no-op
    headers = {"content-type": "application/json"}
    tracing.inject(headers)
    assert headers == {"content-type": "application/json"}
    with tracing.request_span({"method": "POST", "path": "/v1/x", "headers": []}) as span:
        assert span is None
    tracing.close_request(None, RequestRecord("r", "POST", "/v1/x", 0.0))


def test_exporters_follow_otel_traces_exporter() -> None:
    pytest.importorskip("opentelemetry.sdk", reason="the otel extra is missing")
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    exporters = tracing._exporters({"OTEL_TRACES_EXPORTER": "console,bogus"})
    assert len(exporters) == 1 and isinstance(exporters[0], ConsoleSpanExporter)


def test_request_attributes_use_genai_names() -> None:
    slo = SloTarget(name="interactive", ttft_s=0.5)
    record = RequestRecord("r", "POST", "/v1/completions", 0.0, status=200, tenant="acme")
    record.route = RouteRequest("r", "llama", "acme", slo, prompt_tokens=100, max_tokens=8)
    record.ranking = Ranking(endpoints=(), predicted_ttft_s=0.1, reason="slo_met")
    record.endpoint_id, record.attempts = "vllm-a", 1
    record.result = Finished("ok", 200, 98, 8, ttft_s=0.12, tpot_s=0.02, e2e_s=0.3)
    attributes = tracing.request_attributes(record)
    assert attributes["gen_ai.operation.name"] == "text_completion"
    assert attributes["gen_ai.request.model"] == "llama"
    assert attributes["gen_ai.request.max_tokens"] == 8
    assert attributes["gen_ai.usage.input_tokens"] == 98
    assert attributes["gen_ai.usage.output_tokens"] == 8
    assert attributes["gen_ai.server.time_to_first_token"] == 0.12
    assert attributes["gen_ai.server.time_per_output_token"] == 0.02
    assert attributes["slo_gateway.predicted.time_to_first_token"] == 0.1
    assert attributes["slo_gateway.tenant"] == "acme"
    assert attributes["slo_gateway.endpoint"] == "vllm-a"
    assert attributes["http.response.status_code"] == 200

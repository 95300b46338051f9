"""OpenTelemetry tracing: an optional extra (`pip install 'slo-gateway[otel]'`), off by default.

On when the OpenTelemetry SDK is installed and the standard environment asks for traces:
OTEL_TRACES_EXPORTER is set (otlp, console; `none` keeps it off), or OTEL_EXPORTER_OTLP_ENDPOINT
or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, or OTEL_SDK_DISABLED=false. OTEL_SDK_DISABLED=true
always wins. The SDK reads the rest itself (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
OTEL_TRACES_SAMPLER, OTEL_BSP_*, OTEL_EXPORTER_OTLP_HEADERS, ...). The provider is the gateway's
own, not the global one, so FastAPI's built-in telemetry stays off and spans are not doubled.

Off, every function here returns after one check of a module attribute; OpenTelemetry is not
touched and no attribute is computed.

Spans
    POST /v1/chat/completions   SERVER    the request, first byte in to last byte out; its parent
                                          is the caller's `traceparent` when one is sent
      admission                 INTERNAL  tenant limits, then saturation, the prediction and
                                          the deadline queue
        routing                 INTERNAL  the policy's ranking, which admission judges by
      chat <upstream model>     CLIENT    one per upstream attempt, to the end of its response;
                                          its context goes upstream as W3C `traceparent`
Attributes use the GenAI semantic conventions where they exist: gen_ai.operation.name,
gen_ai.request.model, gen_ai.request.max_tokens, gen_ai.provider.name (the configured provider,
else the one its API host is known as, else the endpoint's kind), gen_ai.response.id,
gen_ai.response.model, gen_ai.response.finish_reasons, gen_ai.usage.input_tokens,
gen_ai.usage.output_tokens, gen_ai.usage.cache_read.input_tokens, and
gen_ai.server.time_to_first_token and gen_ai.server.time_per_output_token (seconds, named after
the GenAI server metrics). The
gateway's own live under slo_gateway.*: tenant, slo_class, endpoint, attempts, outcome,
decision.reason, predicted.time_to_first_token, predicted.time_to_first_token_p95.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gateway.telemetry.metrics import log
from gateway.telemetry.record import RequestRecord

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from gateway.config.settings import EndpointConfig

_tracer: Tracer | None = None
_NOTHING: AbstractContextManager[None] = nullcontext()
_OPERATIONS = {"/chat/completions": "chat", "/completions": "text_completion"}


def configure(environ: Mapping[str, str] = os.environ) -> bool:
    """Turn tracing on if the environment asks for it; True when tracing is on."""
    if _tracer is not None:
        return True
    if not wanted(environ):
        return False
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("OTEL_* asks for traces; the SDK is missing: pip install 'slo-gateway[otel]'")
        return False
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: "slo-gateway"}))
    exporters = _exporters(environ)
    if not exporters:
        return False  # nowhere to send spans: making them would be pure cost
    provider = TracerProvider(resource=resource)
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    install(provider)
    log.info("tracing on: exporting spans (%s)", environ.get("OTEL_TRACES_EXPORTER", "otlp"))
    return True


def wanted(environ: Mapping[str, str]) -> bool:
    disabled = environ.get("OTEL_SDK_DISABLED", "").strip().lower()
    exporters = environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if disabled == "true" or exporters == "none":
        return False
    endpoints = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    return bool(exporters) or any(environ.get(k) for k in endpoints) or disabled == "false"


def _exporters(environ: Mapping[str, str]) -> list[SpanExporter]:
    names = [n.strip() for n in environ.get("OTEL_TRACES_EXPORTER", "otlp").lower().split(",")]
    exporters: list[SpanExporter] = []
    for name in filter(None, names):
        if name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            exporters.append(ConsoleSpanExporter())
        elif name == "otlp":
            exporters.append(_otlp_exporter(environ))
        else:
            log.warning("OTEL_TRACES_EXPORTER=%s is not supported here (otlp, console)", name)
    return exporters


def _otlp_exporter(environ: Mapping[str, str]) -> SpanExporter:
    """OTLP over HTTP/protobuf (the `otel` extra), or gRPC when asked and installed."""
    protocol = environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcExporter,
            )

            grpc: SpanExporter = GrpcExporter()
            return grpc
        except ImportError:
            log.warning("OTLP gRPC exporter not installed; exporting over HTTP/protobuf")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def install(provider: TracerProvider | None) -> None:
    """Trace with this provider (tests pass one with an in-memory exporter); None turns off."""
    global _tracer
    _tracer = provider.get_tracer("slo_gateway") if provider is not None else None


def enabled() -> bool:
    return _tracer is not None


def span(name: str) -> AbstractContextManager[Any]:
    """A child span of the current one, or nothing when tracing is off."""
    if _tracer is None:
        return _NOTHING
    return _tracer.start_as_current_span(name)


def inject(headers: dict[str, str]) -> None:
    """Add `traceparent` (and `tracestate`) for the current span; nothing when off."""
    if _tracer is not None:
        from opentelemetry import propagate

        propagate.inject(headers)


def upstream_span(
    endpoint: EndpointConfig, path: str, model: str, record: RequestRecord
) -> AbstractContextManager[None]:
    """One upstream attempt at `path` below the endpoint's base URL for the public `model`. A
    failed attempt's span ends here; the span of the attempt that answered stays open in the
    request's record until the response ends."""
    if _tracer is None:
        return _NOTHING
    return _upstream(_tracer, endpoint, path, model, record)


@contextmanager
def _upstream(
    tracer: Tracer, endpoint: EndpointConfig, path: str, model: str, record: RequestRecord
) -> Iterator[None]:
    from opentelemetry.trace import SpanKind, StatusCode

    attributes = _upstream_attributes(endpoint, path, model)
    name = f"{attributes['gen_ai.operation.name']} {attributes['gen_ai.request.model']}"
    with tracer.start_as_current_span(
        name, kind=SpanKind.CLIENT, attributes=attributes, end_on_exit=False
    ) as current:
        try:
            yield
        except BaseException as exc:
            reason = getattr(exc, "reason", type(exc).__name__)
            current.set_attribute("error.type", reason)
            current.set_status(StatusCode.ERROR, reason)
            current.end()
            raise
    record.upstream_span = current


def _upstream_attributes(endpoint: EndpointConfig, path: str, model: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": _OPERATIONS.get(path, "embeddings"),
        "gen_ai.request.model": endpoint.models.get(model, model),
        "gen_ai.provider.name": provider_name(endpoint),
        "slo_gateway.endpoint": endpoint.id,
    }
    url = urlsplit(endpoint.base_url)
    if url.hostname:
        attributes["server.address"] = url.hostname
    if url.port:
        attributes["server.port"] = url.port
    return attributes


def request_span(scope: Mapping[str, Any]) -> AbstractContextManager[Span | None]:
    """The request's span, current while the app runs; its parent is the current span if a
    server span is already open (FastAPI's own telemetry), else the caller's traceparent."""
    if _tracer is None:
        return nullcontext(None)
    from opentelemetry import propagate, trace

    parent = None
    if not trace.get_current_span().get_span_context().is_valid:
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        parent = propagate.extract(carrier)
    return _tracer.start_as_current_span(
        f"{scope['method']} {scope['path']}", context=parent, kind=trace.SpanKind.SERVER
    )


def close_request(current: Span | None, record: RequestRecord) -> None:
    """Set the request span's attributes from its record; end the answering attempt's span."""
    if current is None:
        return
    from opentelemetry.trace import StatusCode

    attributes = request_attributes(record)
    upstream, result = record.upstream_span, record.result
    if upstream is not None:
        upstream.set_attributes(_result_attributes(record))
        if result is not None:
            upstream.set_attribute("http.response.status_code", result.status)
            if result.outcome == "upstream_error":
                upstream.set_status(StatusCode.ERROR)
        upstream.end()
        record.upstream_span = None
    current.set_attributes(attributes)
    if record.status >= 500:
        current.set_status(StatusCode.ERROR)


def request_attributes(record: RequestRecord) -> dict[str, Any]:
    attributes: dict[str, Any] = {"http.response.status_code": record.status}
    if record.error_code:
        attributes["error.type"] = record.error_code
    if record.tenant:
        attributes["slo_gateway.tenant"] = record.tenant
    route = record.route
    if route is not None:
        attributes["gen_ai.operation.name"] = _OPERATIONS.get(
            record.path.removeprefix("/v1"), "embeddings"
        )
        attributes["gen_ai.request.model"] = route.model
        attributes["slo_gateway.slo_class"] = route.slo.name
        attributes["gen_ai.usage.input_tokens"] = route.prompt_tokens
        if route.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = route.max_tokens
    if record.endpoint_id is not None:
        attributes["slo_gateway.endpoint"] = record.endpoint_id
        attributes["slo_gateway.attempts"] = record.attempts
    return attributes | _decision_attributes(record) | _result_attributes(record)


def _decision_attributes(record: RequestRecord) -> dict[str, Any]:
    ranking = record.ranking
    if ranking is None:
        return {}
    attributes: dict[str, Any] = {"slo_gateway.decision.reason": ranking.reason}
    if ranking.predicted_ttft_s is not None:
        attributes["slo_gateway.predicted.time_to_first_token"] = ranking.predicted_ttft_s
    if ranking.predicted_ttft_p95_s is not None:
        attributes["slo_gateway.predicted.time_to_first_token_p95"] = ranking.predicted_ttft_p95_s
    return attributes


def _result_attributes(record: RequestRecord) -> dict[str, Any]:
    result = record.result
    if result is None:
        return {}
    attributes: dict[str, Any] = {
        "slo_gateway.outcome": result.outcome,
        "gen_ai.usage.input_tokens": result.prompt_tokens,
        "gen_ai.usage.output_tokens": result.output_tokens,
    }
    if result.ttft_s is not None:
        attributes["gen_ai.server.time_to_first_token"] = result.ttft_s
    if result.tpot_s is not None:
        attributes["gen_ai.server.time_per_output_token"] = result.tpot_s
    if result.response_id is not None:
        attributes["gen_ai.response.id"] = result.response_id
    if result.response_model is not None:
        attributes["gen_ai.response.model"] = result.response_model
    if result.finish_reasons:
        attributes["gen_ai.response.finish_reasons"] = list(result.finish_reasons)
    if result.cached_tokens:
        attributes["gen_ai.usage.cache_read.input_tokens"] = result.cached_tokens
    return attributes


# gen_ai.provider.name's well-known values, by the API host an endpoint's base URL names.
PROVIDER_HOSTS = {
    "api.openai.com": "openai",
    "api.anthropic.com": "anthropic",
    "api.groq.com": "groq",
    "api.mistral.ai": "mistral_ai",
    "api.x.ai": "x_ai",
    "api.deepseek.com": "deepseek",
    "api.perplexity.ai": "perplexity",
    "generativelanguage.googleapis.com": "gcp.gemini",
}
PROVIDER_SUFFIXES = {".openai.azure.com": "azure.ai.openai", ".amazonaws.com": "aws.bedrock"}


def provider_name(endpoint: EndpointConfig) -> str:
    """The configured `provider`, else the one its API host is known as, else its kind
    (`vllm` for an engine; `openai` for an unknown OpenAI-compatible host)."""
    if endpoint.provider:
        return endpoint.provider
    host = urlsplit(endpoint.base_url).hostname or ""
    if host in PROVIDER_HOSTS:
        return PROVIDER_HOSTS[host]
    for suffix, name in PROVIDER_SUFFIXES.items():
        if host.endswith(suffix):
            return name
    return endpoint.kind

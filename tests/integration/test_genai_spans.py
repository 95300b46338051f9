"""OpenTelemetry GenAI attributes completed on the spans (in-memory exporter): what the answer
says of itself (id, model, finish reasons) and its usage, whole or streamed, and the provider
by name."""

from __future__ import annotations

from typing import Any

import pytest
from openai import OpenAI

from tests.fixtures.gateway import (
    ENGINE_MODEL,
    PROVIDER_MODEL,
    PUBLIC_MODEL,
    TENANT_KEY,
    Fleet,
    engine,
    eventually,
    fleet_gateway,
    member,
    provider,
)
from tests.integration.test_observability import spans

pytestmark = pytest.mark.integration
__all__ = ["spans"]


def request_spans(exporter: Any, count: int) -> list[Any]:
    def done() -> list[Any]:
        return [s for s in exporter.get_finished_spans() if s.name.startswith("POST ")]

    assert eventually(lambda: len(done()) >= count)
    return done()


@pytest.mark.parametrize("stream", [False, True])
def test_spans_carry_the_answers_id_model_finish_reasons_and_usage(
    spans: Any, stream: bool
) -> None:
    members: Fleet = {"e1": engine(), "hosted": member(provider(), provider="groq")}
    with fleet_gateway(members) as (gateway, _):
        sdk = OpenAI(base_url=gateway.base_url + "/v1", api_key=TENANT_KEY, max_retries=0)
        answers: dict[str, Any] = {}
        for _ in range(2):  # round robin: one to each endpoint
            messages: Any = [{"role": "user", "content": "hi"}]
            if stream:
                chunks = list(
                    sdk.chat.completions.create(
                        model=PUBLIC_MODEL,
                        messages=messages,
                        max_tokens=4,
                        stream=True,
                        stream_options={"include_usage": True},
                    )
                )
                usage = next(c.usage for c in chunks if c.usage is not None)
                reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
                answer = (chunks[0].id, usage, [r for r in reasons if r])
            else:
                whole = sdk.chat.completions.create(
                    model=PUBLIC_MODEL, messages=messages, max_tokens=4
                )
                reasons = [c.finish_reason for c in whole.choices]
                answer = (whole.id, whole.usage, reasons)
            answers[answer[0]] = answer
        found = request_spans(spans, 2)
    upstream = {
        s.attributes["slo_gateway.endpoint"]: s
        for s in spans.get_finished_spans()
        if s.name.startswith("chat ")
    }
    assert upstream["e1"].attributes["gen_ai.provider.name"] == "vllm"
    assert upstream["hosted"].attributes["gen_ai.provider.name"] == "groq"
    models = {ENGINE_MODEL, PROVIDER_MODEL}
    for span in found:
        attributes = span.attributes
        upstream_id, usage, reasons = answers[attributes["gen_ai.response.id"]]
        assert attributes["gen_ai.response.model"] in models  # the upstream's own name
        assert list(attributes["gen_ai.response.finish_reasons"]) == reasons == ["length"]
        assert attributes["gen_ai.usage.input_tokens"] == usage.prompt_tokens
        assert attributes["gen_ai.usage.output_tokens"] == usage.completion_tokens
        endpoint_span = upstream[attributes["slo_gateway.endpoint"]]
        assert endpoint_span.attributes["gen_ai.response.id"] == upstream_id

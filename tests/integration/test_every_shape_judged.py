"""One judgement for every request shape, through the openai and anthropic SDKs: a request that
does not stream is held to its whole answer's budget (the TTFT target plus the TPOT target per
later token), an embedding to the TTFT target, and the router predicts that same quantity, so on
a healthy fleet the decision `slo_met` and the judgement met agree request by request."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import MessageParam
from openai.types.chat import ChatCompletionMessageParam

from tests.fixtures.gateway import PUBLIC_MODEL, TENANT_KEY, one_engine_gateway, runtime_of
from tests.fixtures.servers import UvicornThread

pytestmark = pytest.mark.integration
CLASSES = {
    "interactive": {"ttft_ms": 500, "tpot_ms": 50, "priority": 10},
    "batch": {"deadline_ms": 60000, "sheddable": True},
}
TOKENS = 48  # 48 decode steps of the simulated engine take longer than the 500 ms TTFT target
PROMPT = "Hello there, how are you today?"
HI: list[ChatCompletionMessageParam] = [{"role": "user", "content": PROMPT}]
HI_MESSAGES: list[MessageParam] = [{"role": "user", "content": PROMPT}]


Clients = tuple[UvicornThread, openai.OpenAI, anthropic.Anthropic]


@pytest.fixture(scope="module")
def gateway() -> Iterator[Clients]:
    policy = {"name": "slo_aware", "explore_fraction": 0.0}
    with (
        one_engine_gateway(policy=policy, classes=CLASSES) as gw,
        openai.OpenAI(base_url=gw.base_url + "/v1", api_key=TENANT_KEY, max_retries=0) as oa,
        anthropic.Anthropic(base_url=gw.base_url, api_key=TENANT_KEY, max_retries=0) as an,
    ):
        for _ in range(12):  # warm: the estimate learns TTFT and TPOT from streams
            stream = oa.chat.completions.create(
                model=PUBLIC_MODEL, messages=HI, max_tokens=TOKENS, stream=True
            )
            for _chunk in stream:
                pass
        yield gw, oa, an


def judged(gw: UvicornThread, verdict: str) -> float:
    value = runtime_of(gw).metrics.registry.get_sample_value(
        "slo_gateway_slo_total",
        {"slo_class": "interactive", "tenant": "acme", "endpoint": "e", "result": verdict},
    )
    return value or 0.0


def call(shape: str, oa: openai.OpenAI, an: anthropic.Anthropic) -> Any:
    """One request of the shape, not streamed; its raw response (headers and all)."""
    raw = oa.with_raw_response
    if shape == "chat":
        return raw.chat.completions.create(model=PUBLIC_MODEL, messages=HI, max_tokens=TOKENS)
    if shape == "completions":
        return raw.completions.create(model=PUBLIC_MODEL, prompt=PROMPT, max_tokens=TOKENS)
    if shape == "responses":
        return raw.responses.create(model=PUBLIC_MODEL, input=PROMPT, max_output_tokens=TOKENS)
    if shape == "messages":
        return an.messages.with_raw_response.create(
            model=PUBLIC_MODEL, max_tokens=TOKENS, messages=HI_MESSAGES
        )
    return raw.embeddings.create(model=PUBLIC_MODEL, input=PROMPT)


@pytest.mark.parametrize("shape", ["chat", "completions", "responses", "messages", "embeddings"])
def test_prediction_and_judgement_agree_for_a_whole_answer(gateway: Clients, shape: str) -> None:
    gw, oa, an = gateway
    for _ in range(5):
        met_before, missed_before = judged(gw, "met"), judged(gw, "missed")
        raw = call(shape, oa, an)
        met = judged(gw, "met") - met_before
        missed = judged(gw, "missed") - missed_before
        assert (met, missed) == (1, 0), f"{shape}: judged missed"
        assert raw.headers["x-slo-gateway-decision"] == "slo_met"
        assert raw.headers["x-slo-gateway-at-risk"] == "false"
        assert raw.headers["x-slo-gateway-binding-target"] == "e2e"
        budget_ms = 500 if shape == "embeddings" else 500 + 50 * (TOKENS - 1)
        assert int(raw.headers["x-slo-gateway-target-ms"]) == budget_ms

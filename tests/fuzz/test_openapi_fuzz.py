"""Schemathesis against the gateway's own OpenAPI schema (gateway/server/openapi.py).

Positive cases (bodies the schema allows, half of them naming the served model so they reach the
engine) and negative cases (bodies it forbids) on every API route: OpenAI chat, completions,
embeddings and Responses, Anthropic Messages and count_tokens, the models and a stored response.
Zero 5xx: the engine behind the gateway is healthy and fast, so any 5xx is the gateway's own.
Every error must match the schema's documented statuses and its API's error shape (Anthropic's
on the Anthropic routes, OpenAI's elsewhere); every forbidden body must be refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from tests.fixtures.gateway import (
    PUBLIC_MODEL,
    TENANT_KEY,
    engine,
    one_engine_gateway,
)
from tests.fuzz.anthropic_errors import anthropic_error
from tests.fuzz.openai_errors import openai_error

pytestmark = pytest.mark.integration
AUTH = {"authorization": f"Bearer {TENANT_KEY}"}
EXAMPLES_PER_CASE = 40
OPERATIONS = [
    ("/v1/chat/completions", "POST"),
    ("/v1/completions", "POST"),
    ("/v1/embeddings", "POST"),
    ("/v1/responses", "POST"),
    ("/v1/messages", "POST"),
    ("/v1/messages/count_tokens", "POST"),
    ("/v1/models", "GET"),
    ("/v1/models/{model_id}", "GET"),
    ("/v1/responses/{response_id}", "GET"),
]
# The GET routes take no body, so they have no negative case.
CASES = [
    (path, method, mode)
    for path, method in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if method == "POST" or mode is GenerationMode.POSITIVE
]
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
# A fast engine with a short context, so that generated max_tokens end quickly or are refused.
FAST_ENGINE = {
    "step_base_s": 0.0002,
    "per_seq_s": 0.0,
    "per_kv_token_s": 0.0,
    "prefill_per_token_s": 0.0,
    "prefill_quadratic_s": 0.0,
    "max_model_len": 256,
}


@pytest.fixture(scope="module")
def gateway() -> Iterator[str]:
    with one_engine_gateway(engine(**FAST_ENGINE), server={"max_body_bytes": 256 * 1024}) as gw:
        yield gw.base_url


@pytest.mark.parametrize(("path", "method", "mode"), CASES)
def test_openai_routes_hold_their_schema_under_fuzzing(
    gateway: str, path: str, method: str, mode: GenerationMode
) -> None:
    schema = schemathesis.openapi.from_url(gateway + "/openapi.json")
    strategy = schema[path][method].as_strategy(generation_mode=mode)

    @settings(
        max_examples=EXAMPLES_PER_CASE,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy, reach_the_engine=st.integers(0, 3))
    def fuzz(case: schemathesis.Case[Any], reach_the_engine: int) -> None:
        if reach_the_engine and mode is GenerationMode.POSITIVE and isinstance(case.body, dict):
            # Most positive cases name the served model and a class the tenant may use.
            case.body["model"] = PUBLIC_MODEL
            case.headers.pop("x-slo-class", None)
        response = case.call(base_url=gateway, headers=AUTH, timeout=10)
        case.validate_response(response, checks=CHECKS, headers=AUTH)
        if response.status_code >= 400:
            shape = anthropic_error if path.startswith("/v1/messages") else openai_error
            problem = shape(
                response.status_code, response.headers.get("content-type", [""])[0], _json(response)
            )
            assert problem is None, problem

    fuzz()


def _json(response: schemathesis.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None

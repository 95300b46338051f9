"""Which model serves a request its model cannot, which refusals let another model try, and
whether a request fits a model's context window."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.config.settings import EndpointConfig
from gateway.core.context_window import context_exceeded, model_window, needed_tokens, overflowed
from gateway.core.fallback_chain import FallbackChain, FallbackReason, fallback_reason
from gateway.errors import GatewayError, InvalidRequest, NoEndpointAvailable, Rejected
from gateway.watch.endpoints import Registry

UNAVAILABLE, REFUSED, CONTEXT = FallbackReason


def refused(reason: str) -> Rejected:
    return Rejected("no", status=429, reason=reason, retry_after_s=1.0)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (NoEndpointAvailable("none", code="no_endpoint_available"), UNAVAILABLE),
        (NoEndpointAvailable("none", code="owner_unavailable"), None),  # pinned: never moved
        (refused("saturated"), REFUSED),
        (refused("queue_full"), REFUSED),
        (refused("upstream_rate_limited"), REFUSED),
        (refused("tenant_rate_limited"), None),  # about the caller, not the model
        (refused("tenant_budget_exceeded"), None),
        (context_exceeded("m", 300, 256), CONTEXT),
        (InvalidRequest("bad", code="invalid_value"), None),
    ],
)
def test_only_a_models_own_failures_fall_back(
    error: GatewayError, reason: FallbackReason | None
) -> None:
    assert fallback_reason(error) == reason


def test_a_chain_goes_in_order_and_never_back() -> None:
    chain = FallbackChain("a", fallbacks=("b", "c"))
    assert [chain.next(UNAVAILABLE), chain.next(REFUSED), chain.next(REFUSED)] == ["b", "c", None]


def test_after_a_context_failure_only_context_fallbacks_are_tried() -> None:
    chain = FallbackChain("a", fallbacks=("b",), context_fallbacks=("big", "huge"))
    assert chain.next(CONTEXT) == "big"
    assert chain.next(UNAVAILABLE) == "huge"  # "b" may be no larger than "a"
    assert chain.next(REFUSED) is None


def test_a_model_without_a_chain_has_no_fallback() -> None:
    assert FallbackChain("a", context_fallbacks=("big",)).next(REFUSED) is None


@pytest.mark.parametrize(
    ("status", "body", "too_long"),
    [
        # vLLM (and the simulated engine): no code, its wording
        (
            400,
            b'{"error": {"message": "This model\'s maximum context length is 256 tokens. '
            b'However, you requested 300 tokens", "type": "BadRequestError", "code": 400}}',
            True,
        ),
        (400, b'{"error": {"message": "x", "code": "context_length_exceeded"}}', True),  # OpenAI
        # Anthropic
        (
            400,
            b'{"type": "error", "error": {"type": "invalid_request_error", '
            b'"message": "prompt is too long: 208310 tokens > 200000 maximum"}}',
            True,
        ),
        (400, b'{"error": {"message": "temperature must be at most 2"}}', False),
        (500, b'{"error": {"message": "maximum context length"}}', False),
        (400, b"not json", False),
        (400, b"[]", False),
    ],
)
def test_an_engines_context_refusal_is_read_from_its_400(
    status: int, body: bytes, too_long: bool
) -> None:
    assert overflowed(status, body) is too_long


def test_a_request_needs_its_prompt_and_max_tokens_or_one_token() -> None:
    assert needed_tokens(250, 6) == 256
    assert needed_tokens(256, None) == 257  # vLLM refuses a prompt that fills the window


def _endpoint(endpoint_id: str, **extra: Any) -> EndpointConfig:
    models = {"m": "org/m"}
    return EndpointConfig(
        id=endpoint_id, kind="vllm", base_url="http://e/v1", models=models, **extra
    )


def test_a_models_window_is_its_largest_once_every_endpoint_is_known() -> None:
    registry = Registry([_endpoint("a", max_model_len=2048), _endpoint("b")])
    assert model_window(registry, "m", "chat") is None  # b could take anything
    registry.learn_window("b", 8192)
    assert model_window(registry, "m", "chat") == 8192
    assert model_window(registry, "other", "chat") is None

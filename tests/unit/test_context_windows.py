"""Each engine's context window: configured, else read from vLLM's /v1/models listing."""

from __future__ import annotations

from gateway.config.settings import EndpointConfig
from gateway.watch.context_windows import window_of
from gateway.watch.endpoints import Registry


def _endpoint(endpoint_id: str, max_model_len: int | None = None) -> EndpointConfig:
    models = {"m": "org/m"}
    return EndpointConfig(
        id=endpoint_id,
        kind="vllm",
        base_url="http://e/v1",
        models=models,
        max_model_len=max_model_len,
    )


def test_an_engines_window_is_read_from_its_model_listing() -> None:
    listing = {
        "data": [{"id": "org/m", "max_model_len": 4096}, {"id": "other", "max_model_len": 9}]
    }
    assert window_of(_endpoint("e"), listing) == 4096
    assert window_of(_endpoint("e"), {"data": [{"id": "org/m"}]}) is None  # a provider's
    assert window_of(_endpoint("e"), {"object": "error"}) is None


def test_a_configured_window_wins_over_a_learnt_one() -> None:
    registry = Registry([_endpoint("a", 2048), _endpoint("b")])
    registry.learn_window("a", 8192)
    assert registry.window("a") == 2048
    assert registry.window("b") is None
    registry.learn_window("b", 8192)
    assert registry.window("b") == 8192

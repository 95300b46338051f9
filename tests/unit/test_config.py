from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.config.settings import ConfigError, hash_key, load_config, parse_config


def minimal() -> dict[str, Any]:
    return {
        "endpoints": [
            {
                "id": "vllm-a",
                "kind": "vllm",
                "base_url": "http://127.0.0.1:9000/v1",
                "models": {"llama": "meta-llama/Llama-3-8B"},
            }
        ],
        "tenants": {
            "acme": {
                "api_key_env": "ACME_KEY",
                "allowed_classes": ["interactive"],
                "default_class": "interactive",
            }
        },
        "classes": {"interactive": {"ttft_ms": 500, "tpot_ms": 50, "priority": 10}},
    }


def test_minimal_config_gets_defaults() -> None:
    config = parse_config(minimal())
    assert config.policy.name == "least_loaded"
    assert config.server.max_attempts == 3
    assert config.endpoints[0].root_url == "http://127.0.0.1:9000"
    assert config.classes["interactive"].target("interactive").ttft_s == 0.5


def test_unknown_key_is_named_in_the_error() -> None:
    data = minimal()
    data["endpoints"][0]["api_key"] = "sk-inline"
    with pytest.raises(ConfigError, match=r"endpoints\.0\.api_key: Extra inputs"):
        parse_config(data)


def test_wrong_kind_is_named_in_the_error() -> None:
    data = minimal()
    data["endpoints"][0]["kind"] = "triton"
    with pytest.raises(ConfigError, match=r"endpoints\.0\.kind"):
        parse_config(data)


def test_tenant_class_must_exist() -> None:
    data = minimal()
    data["tenants"]["acme"]["allowed_classes"] = ["interactive", "batch"]
    with pytest.raises(ConfigError, match=r"unknown classes \['batch'\]"):
        parse_config(data)


def test_tenant_needs_a_key_reference() -> None:
    data = minimal()
    del data["tenants"]["acme"]["api_key_env"]
    with pytest.raises(ConfigError, match="api_key_env or api_key_sha256"):
        parse_config(data)


def test_unknown_policy_is_rejected() -> None:
    data = minimal()
    data["policy"] = {"name": "fastest_guess"}
    with pytest.raises(ConfigError, match="policy"):
        parse_config(data)


def test_duplicate_endpoint_ids_are_rejected() -> None:
    data = minimal()
    data["endpoints"].append(dict(data["endpoints"][0]))
    with pytest.raises(ConfigError, match="duplicate endpoint ids"):
        parse_config(data)


def test_hashed_tenant_keys_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    data = minimal()
    data["tenants"]["acme"] = {
        "api_key_sha256": [hash_key("sk-hashed")],
        "allowed_classes": ["interactive"],
        "default_class": "interactive",
    }
    assert parse_config(data).tenants["acme"].key_hashes() == [hash_key("sk-hashed")]


def test_load_config_reports_bad_yaml(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("endpoints: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(path)


def test_apis_default_by_kind_and_an_unknown_api_is_an_error() -> None:
    data = minimal()
    hosted = data["endpoints"][0] | {"id": "hosted", "kind": "openai"}
    claude = hosted | {"id": "claude", "apis": ["messages"], "api_key_header": "x-api-key"}
    data["endpoints"] += [hosted, claude]
    endpoints = {e.id: e for e in parse_config(data).endpoints}
    assert endpoints["vllm-a"].apis == ["chat", "responses", "messages"]
    assert endpoints["hosted"].apis == ["chat", "responses"]
    assert endpoints["claude"].apis == ["messages"]
    data["endpoints"][0]["apis"] = ["graphql"]
    with pytest.raises(ConfigError, match="apis"):
        parse_config(data)

"""A class's engine priority and service tier in the body each endpoint gets."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.config.settings import EndpointConfig, SloClassConfig, TenantConfig, parse_config
from gateway.core.engine_hints import EngineHints, hints_for
from gateway.server.auth import Caller, KeyRing
from gateway.upstream.client import AiohttpUpstream, UpstreamCall

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def endpoint(**declares: Any) -> EndpointConfig:
    fields = {"id": "e", "kind": "vllm", "base_url": "http://127.0.0.1:1/v1", "models": {"m": "up"}}
    return EndpointConfig.model_validate(fields | declares)


def sent(hints: EngineHints | None, target: EndpointConfig, **client: Any) -> dict[str, Any]:
    """The body `target` receives for a client body with `client`'s extra fields."""
    call = UpstreamCall("r1", "/chat/completions", BODY | client, "m", False, hints=hints)
    body: dict[str, Any] = orjson.loads(AiohttpUpstream._body(target, call))
    assert body["model"] == "up"
    return body


PRIORITY = endpoint(priority_scheduling=True)
ANY_TIER = endpoint(kind="openai", service_tiers=True)
FLEX_ONLY = endpoint(kind="openai", service_tiers=["flex"])
PLAIN = endpoint()
KEEP = EngineHints(engine_priority=5, service_tier="flex", enforce=False)
ENFORCE = EngineHints(engine_priority=5, service_tier="flex", enforce=True)


def test_the_class_priority_goes_only_to_endpoints_that_schedule_by_priority() -> None:
    assert sent(KEEP, PRIORITY)["priority"] == 5
    assert "priority" not in sent(KEEP, PLAIN)
    assert "priority" not in sent(KEEP, ANY_TIER)


def test_the_class_tier_goes_only_to_endpoints_that_take_it() -> None:
    assert sent(KEEP, ANY_TIER)["service_tier"] == "flex"
    assert sent(KEEP, FLEX_ONLY)["service_tier"] == "flex"
    assert "service_tier" not in sent(EngineHints(None, "priority", False), FLEX_ONLY)
    assert "service_tier" not in sent(KEEP, PRIORITY)


def test_a_value_the_client_set_is_kept() -> None:
    assert sent(KEEP, PRIORITY, priority=-3)["priority"] == -3
    assert sent(KEEP, ANY_TIER, service_tier="priority")["service_tier"] == "priority"
    assert sent(KEEP, PRIORITY, priority=None)["priority"] == 5, "null is no value"


def test_an_enforcing_tenant_gets_the_class_value_instead_of_its_own() -> None:
    assert sent(ENFORCE, PRIORITY, priority=-3)["priority"] == 5
    assert sent(ENFORCE, ANY_TIER, service_tier="priority")["service_tier"] == "flex"


def test_an_enforcing_tenant_loses_its_own_value_where_the_class_sets_none() -> None:
    bare = EngineHints(None, None, enforce=True)
    assert "priority" not in sent(bare, PRIORITY, priority=-3)
    assert "service_tier" not in sent(bare, ANY_TIER, service_tier="priority")
    unlisted = EngineHints(None, "priority", enforce=True)
    assert "service_tier" not in sent(unlisted, FLEX_ONLY, service_tier="priority")


def test_endpoints_that_take_neither_field_get_the_body_as_sent() -> None:
    body = sent(ENFORCE, PLAIN, priority=-3, service_tier="priority")
    assert body == BODY | {"model": "up", "priority": -3, "service_tier": "priority"}
    assert sent(None, PRIORITY) == BODY | {"model": "up"}


@pytest.mark.parametrize(
    ("klass", "enforce", "expected"),
    [
        (SloClassConfig(), False, None),
        (SloClassConfig(), True, EngineHints(None, None, True)),
        (SloClassConfig(engine_priority=0), False, EngineHints(0, None, False)),
        (SloClassConfig(service_tier="flex"), False, EngineHints(None, "flex", False)),
    ],
)
def test_hints_exist_only_when_there_is_something_to_do(
    klass: SloClassConfig, enforce: bool, expected: EngineHints | None
) -> None:
    tenant = TenantConfig(
        api_key_env="K",
        allowed_classes=["c"],
        default_class="c",
        enforce_class_priority=enforce,
    )
    assert hints_for(tenant, klass) == expected


def test_the_keyring_holds_each_tenants_hints_per_allowed_class() -> None:
    config = parse_config(
        {
            "endpoints": [
                {"id": "e", "kind": "vllm", "base_url": "http://h/v1", "models": {"m": "u"}}
            ],
            "tenants": {
                "acme": {"api_key_env": "K", "allowed_classes": ["fast", "slow"],
                         "default_class": "fast", "enforce_class_priority": True},
                "zeta": {"api_key_env": "K", "allowed_classes": ["slow"], "default_class": "slow"},
            },
            "classes": {"fast": {"engine_priority": -1}, "slow": {"service_tier": "flex"}},
        }
    )  # fmt: skip
    ring = KeyRing(config)
    acme, zeta = Caller("acme", config.tenants["acme"]), Caller("zeta", config.tenants["zeta"])
    assert ring.hints(acme, "fast") == EngineHints(-1, None, True)
    assert ring.hints(acme, "slow") == EngineHints(None, "flex", True)
    assert ring.hints(zeta, "slow") == EngineHints(None, "flex", False)


def test_service_tiers_is_a_flag_or_a_list_of_tiers() -> None:
    assert endpoint(service_tiers=["flex", "priority"]).service_tiers == ["flex", "priority"]
    with pytest.raises(ValueError, match="service_tiers"):
        endpoint(service_tiers="flex")

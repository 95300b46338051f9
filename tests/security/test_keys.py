"""Tenant keys: stored only as SHA-256 digests, compared without leaking, and a wrong key is a
401 that says nothing about which tenants exist."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterator

import httpx
import pytest

from gateway.config.settings import hash_key, parse_config
from gateway.errors import AuthenticationFailed
from gateway.server import auth
from gateway.server.auth import KeyRing
from tests.fixtures.gateway import (
    ADMIN_KEY,
    OTHER_TENANT_KEY,
    TENANT_KEY,
    TENANTS,
    chat_body,
    config,
    endpoint,
    one_engine_gateway,
)

pytestmark = pytest.mark.integration
HASHED_KEY = "sk-test-tenant-stored-as-a-hash"


# The suite's tenants and one more whose key the config holds only as its SHA-256 digest.
WITH_HASHED = TENANTS | {
    "hashed": {
        "api_key_sha256": [hash_key(HASHED_KEY)],
        "allowed_classes": ["batch"],
        "default_class": "batch",
    }
}


def hashed_config(engine_url: str) -> dict[str, object]:
    return config([endpoint("e", engine_url)], tenants=WITH_HASHED)


@pytest.fixture(scope="module")
def gateway() -> Iterator[str]:
    with one_engine_gateway(tenants=WITH_HASHED) as server:
        yield server.base_url


def post(gateway: str, authorization: str | None) -> httpx.Response:
    headers = {"authorization": authorization} if authorization is not None else {}
    body = chat_body(max_tokens=2)
    return httpx.post(gateway + "/v1/chat/completions", json=body, headers=headers, timeout=10)


def test_a_key_stored_only_as_its_sha256_authenticates(gateway: str) -> None:
    assert post(gateway, f"Bearer {HASHED_KEY}").status_code == 200
    # The digest is not a key: someone who reads the config file cannot use it.
    assert post(gateway, f"Bearer {hash_key(HASHED_KEY)}").status_code == 401


def test_the_keyring_holds_digests_never_clear_keys() -> None:
    keyring = KeyRing(parse_config(hashed_config("http://127.0.0.1:9"), "test"))
    held = repr(vars(keyring))
    for key in (TENANT_KEY, OTHER_TENANT_KEY, ADMIN_KEY, HASHED_KEY):
        assert key not in held
        assert hash_key(key) in held


def test_keys_are_hashed_before_any_lookup_and_admin_keys_compared_in_constant_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A lookup keyed by SHA-256 digests cannot be steered byte by byte: the presented key is
    hashed first, whatever it is; the admin digest goes through hmac.compare_digest."""
    hashed: list[str] = []
    compared: list[tuple[str, str]] = []
    compare_digest = hmac.compare_digest

    def spy_hash(key: str) -> str:
        hashed.append(key)
        return hash_key(key)

    def spy_compare(a: str, b: str) -> bool:
        compared.append((a, b))
        return compare_digest(a, b)

    monkeypatch.setattr(auth, "hash_key", spy_hash)
    monkeypatch.setattr(hmac, "compare_digest", spy_compare)
    keyring = KeyRing(parse_config(hashed_config("http://127.0.0.1:9"), "test"))
    assert keyring.caller(f"Bearer {TENANT_KEY}").tenant == "acme"
    with pytest.raises(AuthenticationFailed):
        keyring.require_admin(f"Bearer {TENANT_KEY}")
    assert hashed[-2:] == [TENANT_KEY, TENANT_KEY]
    assert compared == [(hash_key(TENANT_KEY), hash_key(ADMIN_KEY))]


def test_a_wrong_key_is_the_same_401_whatever_it_resembles(gateway: str) -> None:
    near_misses = [
        "sk-test-no-such-tenant",
        TENANT_KEY[:-1],  # a real key minus its last character
        TENANT_KEY + "x",
        TENANT_KEY.upper(),
        hash_key(TENANT_KEY),
        ADMIN_KEY,  # the admin key is not a tenant key
        "acme",  # a tenant's name
        "x" * 4096,
    ]
    responses = [post(gateway, f"Bearer {key}") for key in near_misses]
    assert {r.status_code for r in responses} == {401}
    assert len({r.content for r in responses}) == 1, "the 401 body varies with the key"
    header_names = {frozenset(r.headers.keys()) for r in responses}
    assert len(header_names) == 1
    body = responses[0].json()["error"]
    assert body["code"] == "invalid_api_key" and "acme" not in responses[0].text


def test_a_missing_or_malformed_authorization_is_401(gateway: str) -> None:
    for authorization in (None, "", "Bearer", "Bearer x y", "Basic " + TENANT_KEY, TENANT_KEY):
        response = post(gateway, authorization)
        assert response.status_code == 401, authorization
        assert response.json()["error"]["type"] == "invalid_request_error"


def test_startup_warns_of_every_tenant_whose_key_variable_is_unset_or_empty(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A tenant whose variable is missing would otherwise start silently and answer 401 to
    everything; the warning names the tenant and the variable."""
    monkeypatch.delenv("TEST_UNSET_TENANT_KEY", raising=False)
    monkeypatch.setenv("TEST_BLANK_TENANT_KEY", "")
    unset = {"allowed_classes": ["batch"], "default_class": "batch"}
    tenants = TENANTS | {
        "ghost": unset | {"api_key_env": "TEST_UNSET_TENANT_KEY"},
        "blank": unset | {"api_key_env": "TEST_BLANK_TENANT_KEY"},
    }
    with (
        caplog.at_level(logging.WARNING, logger="slo_gateway"),
        one_engine_gateway(tenants=tenants) as gateway,
    ):
        assert post(gateway.base_url, f"Bearer {TENANT_KEY}").status_code == 200
    warnings = [r.getMessage() for r in caplog.records if "api_key_env" in r.getMessage()]
    assert len(warnings) == 2, warnings
    assert "'ghost'" in warnings[0] and "TEST_UNSET_TENANT_KEY" in warnings[0]
    assert "'blank'" in warnings[1] and "TEST_BLANK_TENANT_KEY" in warnings[1]

"""Tenants and API keys made through the admin API, on one gateway: a key's life (create, use,
narrow, rotate, revoke, expire), its allowlist on every API with both SDKs, bad input, and
the audit log. Two replicas over Redis: tests/integration/test_control_replicas.py."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.fixtures.gateway import (
    ADMIN_KEY,
    ENGINE_MODEL,
    PUBLIC_MODEL,
    TENANT_KEY,
    chat_body,
    engine,
    eventually,
    one_engine_gateway,
    usage_view,
)

pytestmark = pytest.mark.integration
OTHER_MODEL = "llama-3-8b-long"  # a second public name on the same engine
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
HI = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def gateway() -> Iterator[str]:
    models = {PUBLIC_MODEL: ENGINE_MODEL, OTHER_MODEL: ENGINE_MODEL}
    options = {"models": models, "price": {"input_per_1m": 100.0, "output_per_1m": 200.0}}
    with one_engine_gateway(engine(), endpoint_options=options) as server:
        yield server.base_url


def admin(gateway: str, method: str, path: str, body: Any = None) -> httpx.Response:
    return httpx.request(method, gateway + path, json=body, headers=ADMIN, timeout=10)


def new_key(gateway: str, **fields: Any) -> dict[str, Any]:
    response = admin(gateway, "POST", "/admin/keys", {"tenant": "acme"} | fields)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


def chat(gateway: str, key: str, model: str = PUBLIC_MODEL) -> httpx.Response:
    body = chat_body(max_tokens=2) | {"model": model}
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(gateway + "/v1/chat/completions", json=body, headers=headers, timeout=10)


def test_a_created_key_serves_its_tenant_and_its_secret_is_shown_once(gateway: str) -> None:
    created = new_key(gateway, name="ci", metadata={"team": "search"})
    secret = created["key"]
    assert secret.startswith("sk-sg-") and created["masked"].endswith(secret[-4:])
    assert created["source"] == "api" and "sha256" not in created
    assert chat(gateway, secret).status_code == 200
    shown = [
        admin(gateway, "GET", f"/admin/keys/{created['id']}").text,
        admin(gateway, "GET", "/admin/keys?tenant=acme").text,
        admin(gateway, "PATCH", f"/admin/keys/{created['id']}", {"name": "ci-2"}).text,
        admin(gateway, "POST", f"/admin/keys/{created['id']}/revoke").text,
    ]
    for text in shown:
        assert secret not in text and created["id"] in text
        assert "sha256" not in text


def test_rotate_gives_a_new_secret_and_the_old_one_stops(gateway: str) -> None:
    created = new_key(gateway)
    rotated = admin(gateway, "POST", f"/admin/keys/{created['id']}/rotate").json()
    assert rotated["key"] != created["key"]
    assert chat(gateway, rotated["key"]).status_code == 200
    old = chat(gateway, created["key"])
    assert old.status_code == 401 and old.json()["error"]["code"] == "invalid_api_key"


def test_a_rotation_with_grace_keeps_the_old_secret_working_until_it_ends(gateway: str) -> None:
    created = new_key(gateway)
    path = f"/admin/keys/{created['id']}/rotate"
    assert admin(gateway, "POST", path, {"grace_s": -1}).json()["error"]["param"] == "grace_s"
    rotated = admin(gateway, "POST", path, {"grace_s": 1.0}).json()
    assert "previous_sha256" not in rotated and rotated["previous_until"] > time.time()
    assert chat(gateway, rotated["key"]).status_code == 200
    assert chat(gateway, created["key"]).status_code == 200  # within the grace
    time.sleep(max(0.0, rotated["previous_until"] - time.time()) + 0.05)
    old = chat(gateway, created["key"])
    assert old.status_code == 401 and old.json()["error"]["code"] == "key_rotated"
    assert chat(gateway, rotated["key"]).status_code == 200
    again = admin(gateway, "POST", path).json()  # no body: no grace, the last secret stops
    assert again["previous_until"] is None
    assert chat(gateway, rotated["key"]).json()["error"]["code"] == "invalid_api_key"
    assert chat(gateway, created["key"]).json()["error"]["code"] == "invalid_api_key"


def test_revoked_and_expired_keys_are_refused_with_their_own_codes(gateway: str) -> None:
    revoked = new_key(gateway)
    admin(gateway, "POST", f"/admin/keys/{revoked['id']}/revoke").raise_for_status()
    refused = chat(gateway, revoked["key"])
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "key_revoked"
    expiring = new_key(gateway, expires_at=time.time() + 3600)
    assert chat(gateway, expiring["key"]).status_code == 200
    ended = {"expires_at": time.time() - 1}
    admin(gateway, "PATCH", f"/admin/keys/{expiring['id']}", ended).raise_for_status()
    expired = chat(gateway, expiring["key"])
    assert expired.status_code == 401 and expired.json()["error"]["code"] == "key_expired"


def test_a_key_outside_its_models_gets_403_on_every_api_with_both_sdks(gateway: str) -> None:
    key = new_key(gateway, allowed_models=[PUBLIC_MODEL])["key"]
    client = openai.OpenAI(base_url=gateway + "/v1", api_key=key, max_retries=0)
    assert client.chat.completions.create(model=PUBLIC_MODEL, messages=HI, max_tokens=2)  # type: ignore[arg-type]
    calls: dict[str, Callable[[], object]] = {
        "chat": lambda: client.chat.completions.create(
            model=OTHER_MODEL,
            messages=HI,  # type: ignore[arg-type]
            max_tokens=2,
        ),
        "responses": lambda: client.responses.create(model=OTHER_MODEL, input="Hello"),
        "embeddings": lambda: client.embeddings.create(model=OTHER_MODEL, input="Hello"),
    }
    for api, call in calls.items():
        with pytest.raises(openai.PermissionDeniedError) as denied:
            call()
        assert denied.value.code == "model_not_allowed", api
    assert [m.id for m in client.models.list()] == [PUBLIC_MODEL]
    claude = anthropic.Anthropic(base_url=gateway, api_key=key, max_retries=0)
    with pytest.raises(anthropic.PermissionDeniedError) as refused:
        claude.messages.create(model=OTHER_MODEL, max_tokens=2, messages=HI)  # type: ignore[arg-type]
    assert refused.value.body["error"]["type"] == "permission_error"  # type: ignore[index]
    assert "may not use the model" in refused.value.body["error"]["message"]  # type: ignore[index]
    assert [m.id for m in claude.models.list()] == [PUBLIC_MODEL]
    unnarrowed = openai.OpenAI(base_url=gateway + "/v1", api_key=TENANT_KEY)
    assert {m.id for m in unnarrowed.models.list()} == {PUBLIC_MODEL, OTHER_MODEL}


def test_a_key_narrows_its_tenants_classes(gateway: str) -> None:
    key = new_key(gateway, allowed_classes=["batch"])["key"]
    headers = {"authorization": f"Bearer {key}"}
    url = gateway + "/v1/chat/completions"
    served = httpx.post(url, json=chat_body(max_tokens=2), headers=headers, timeout=10)
    assert served.status_code == 200  # the tenant's default (interactive) is not the key's
    denied = httpx.post(
        url, json=chat_body(max_tokens=2), headers=headers | {"x-slo-class": "interactive"}
    )
    assert denied.status_code == 403 and denied.json()["error"]["code"] == "slo_class_not_allowed"


def test_a_keys_own_request_limit_is_counted_apart_from_its_tenants(gateway: str) -> None:
    key = new_key(gateway, limits={"requests_per_min": 2})["key"]
    statuses = [chat(gateway, key).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    assert chat(gateway, TENANT_KEY).status_code == 200  # the tenant itself is not limited


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"tenant": "acme", "colour": "red"}, "colour"),
        ({"tenant": "nobody"}, "tenant"),
        ({"tenant": "acme", "allowed_models": ["gpt-9"]}, "allowed_models"),
        ({"tenant": "acme", "allowed_classes": ["gold"]}, "allowed_classes"),
        ({"tenant": "acme", "limits": {"requests_per_min": -1}}, "limits.requests_per_min"),
        ({"tenant": "acme", "budget": {"usd_per_day": -5}}, "budget.usd_per_day"),
        ({}, "tenant"),
    ],
)
def test_bad_key_input_is_a_400_naming_the_field(
    gateway: str, body: dict[str, Any], param: str
) -> None:
    response = admin(gateway, "POST", "/admin/keys", body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_tenants_by_api_beside_the_configs(gateway: str) -> None:
    made = admin(
        gateway,
        "POST",
        "/admin/tenants",
        {"name": "beta", "allowed_classes": ["batch"], "default_class": "batch"},
    )
    assert made.status_code == 201 and made.json()["source"] == "api"
    key = new_key(gateway, tenant="beta")
    assert chat(gateway, key["key"]).status_code == 200
    # its usage is settled in the background: listed beside the config's tenants once it is
    assert eventually(lambda: usage_view(gateway).get("beta", {}).get("requests") == 1)
    board = admin(gateway, "GET", "/admin/dashboard.json").json()["tenants"]
    assert [row["total"]["requests"] for row in board if row["name"] == "beta"] == [1]
    tenants = admin(gateway, "GET", "/admin/tenants").json()["data"]
    listed = {tenant["name"]: tenant["source"] for tenant in tenants}
    assert listed == {"acme": "config", "zeta": "config", "beta": "api"}
    clash = admin(
        gateway,
        "POST",
        "/admin/tenants",
        {"name": "acme", "allowed_classes": ["batch"], "default_class": "batch"},
    )
    assert clash.status_code == 409
    assert admin(gateway, "PATCH", "/admin/tenants/acme", {"slo_hints": True}).status_code == 409
    changed = admin(gateway, "PATCH", "/admin/tenants/beta", {"limits": {"requests_per_min": 50}})
    assert changed.json()["limits"]["requests_per_min"] == 50
    assert admin(gateway, "DELETE", "/admin/tenants/beta").status_code == 409  # a live key
    admin(gateway, "POST", f"/admin/keys/{key['id']}/revoke").raise_for_status()
    assert admin(gateway, "DELETE", "/admin/tenants/beta").status_code == 200
    assert chat(gateway, key["key"]).status_code == 401


def test_the_admin_api_needs_the_admin_key(gateway: str) -> None:
    for key in (TENANT_KEY, "sk-wrong"):
        headers = {"authorization": f"Bearer {key}"}
        response = httpx.post(gateway + "/admin/keys", json={"tenant": "acme"}, headers=headers)
        assert response.status_code == 401


def test_the_admin_api_is_rate_limited() -> None:
    from gateway.server.control_routes import ADMIN_REQUESTS_PER_MIN

    with one_engine_gateway() as server, httpx.Client(headers=ADMIN, timeout=10) as http:
        answers = [http.get(server.base_url + "/admin/keys") for _ in range(ADMIN_REQUESTS_PER_MIN)]
        refused = http.get(server.base_url + "/admin/keys")
    assert {answer.status_code for answer in answers} == {200}
    assert refused.status_code == 429 and refused.headers["retry-after"] == "10"
    assert refused.json()["error"]["code"] == "admin_rate_limited"


def test_every_admin_change_is_one_audit_line_without_secrets(
    gateway: str, caplog: pytest.LogCaptureFixture
) -> None:
    audit = logging.getLogger("slo_gateway.audit")
    audit.addHandler(caplog.handler)
    try:
        created = new_key(gateway)
        admin(gateway, "PATCH", f"/admin/keys/{created['id']}", {"name": "renamed"})
        rotated = admin(gateway, "POST", f"/admin/keys/{created['id']}/rotate").json()
        admin(gateway, "POST", f"/admin/keys/{created['id']}/revoke")
    finally:
        audit.removeHandler(caplog.handler)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == audit.name]
    assert [line["audit"] for line in lines] == [
        "key.create",
        "key.update",
        "key.rotate",
        "key.revoke",
    ]
    assert lines[1]["before"]["name"] is None and lines[1]["after"]["name"] == "renamed"
    assert lines[3]["after"]["revoked_at"] is not None
    text = json.dumps(lines)
    for secret in (created["key"], rotated["key"], ADMIN_KEY):
        assert secret not in text
    assert all(line["actor"]["admin_key_sha256_prefix"] for line in lines)


def test_keys_are_listed_with_spend_and_last_use_on_the_dashboard(gateway: str) -> None:
    created = new_key(gateway, name="billing")
    for _ in range(2):
        assert chat(gateway, created["key"]).status_code == 200
    listed = admin(gateway, "GET", "/admin/keys?tenant=acme").json()["data"]
    usage = next(k for k in listed if k["id"] == created["id"])["usage"]
    assert usage["requests"] == 2 and usage["spend_usd"] > 0
    assert usage["last_used_hour"] == time.strftime("%Y-%m-%dT%H:00Z", time.gmtime())
    board = admin(gateway, "GET", "/admin/dashboard.json").json()
    shown = next(k for k in board["keys"] if k["id"] == created["id"])
    assert shown["usage"]["requests"] == 2 and shown["masked"] == created["masked"]
    page = admin(gateway, "GET", "/dashboard").text
    assert created["masked"] in page and created["key"] not in page

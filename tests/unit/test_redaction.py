"""`Redactor`: every configured secret out of error bodies and error events, nothing scanned
or changed elsewhere."""

from __future__ import annotations

import os

import pytest

from gateway.config.settings import Settings, parse_config
from gateway.server.runtime import Runtime
from gateway.upstream.redaction import REDACTED, Redactor, configured_secrets
from tests.fixtures.gateway import (
    ADMIN_KEY,
    METRICS_TOKEN,
    PROVIDER_KEY,
    TENANT_KEY,
    config,
    endpoint,
)

KEY = "sk-live-0123456789"
ERROR = b'data: {"error": {"message": "key sk-live-0123456789 exhausted"}}\n\n'


def test_error_events_and_error_bodies_lose_every_secret() -> None:
    redact = Redactor([KEY, "sk-other-secret"])
    assert redact.events(ERROR) == ERROR.replace(KEY.encode(), REDACTED)
    body = b'{"error": {"message": "sk-other-secret and sk-live-0123456789"}}'
    assert redact.body(400, body) == b'{"error": {"message": "[redacted] and [redacted]"}}'
    assert redact.body(200, body).count(REDACTED) == 2  # an error in a 200 is an error too
    assert redact.body(502, b"upstream said sk-live-0123456789") == b"upstream said [redacted]"


def test_content_without_an_error_is_passed_through_untouched() -> None:
    redact = Redactor([KEY])
    content = b'data: {"choices": [{"delta": {"content": "sk-live-0123456789"}}]}\n\n'
    assert redact.events(content) is content
    assert redact.body(200, content) is content


def test_a_secret_inside_a_longer_one_does_not_leave_a_tail() -> None:
    redact = Redactor(["sk-live-0123", KEY])
    assert redact(b'"error" ' + KEY.encode()) == b'"error" ' + REDACTED


@pytest.mark.parametrize("short", ["", "abc", "1234567"])
def test_secrets_too_short_to_be_keys_are_not_redacted(short: str) -> None:
    assert Redactor([short]).events(b'"error" abc 1234567') == b'"error" abc 1234567'


def test_the_configured_secrets_are_every_key_the_environment_holds() -> None:
    data = config(
        [endpoint("e", "http://127.0.0.1:9", kind="openai")],
        server={"admin_key_env": "TEST_ADMIN_KEY", "metrics_token_env": "TEST_METRICS_TOKEN"},
    )
    secrets = configured_secrets(parse_config(data, "test"))
    assert set(secrets) >= {PROVIDER_KEY, TENANT_KEY, ADMIN_KEY, METRICS_TOKEN}


async def test_a_reload_keeps_the_running_endpoints_keys_and_adds_the_new_tenants() -> None:
    data = config([endpoint("e", "http://127.0.0.1:9", kind="openai")])
    runtime = Runtime.build(parse_config(data, "test"), Settings())
    reloaded = config([endpoint("other", "http://127.0.0.1:9")])  # endpoints apply on restart
    reloaded["tenants"]["new"] = reloaded["tenants"].pop("zeta") | {"api_key_env": "TEST_NEW_KEY"}
    os.environ["TEST_NEW_KEY"] = "sk-test-tenant-added-on-reload"
    try:
        runtime.apply(parse_config(reloaded, "test"))
        echoed = f'"error": "{PROVIDER_KEY} sk-test-tenant-added-on-reload"'.encode()
        assert runtime.responder.redactor.events(echoed) == b'"error": "[redacted] [redacted]"'
    finally:
        del os.environ["TEST_NEW_KEY"]
        await runtime.close()

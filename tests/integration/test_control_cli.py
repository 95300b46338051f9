"""`slo-gateway keys ...` and `slo-gateway tenants ...` against a running gateway: a key's
whole life from the shell, and the exit codes of each way it can go wrong."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from typer.testing import CliRunner

from gateway.cli import _register_tools, cli
from tests.fixtures.gateway import ADMIN_KEY, chat_body, one_engine_gateway
from tests.fixtures.servers import free_port

pytestmark = pytest.mark.integration
_register_tools()


@pytest.fixture(scope="module")
def gateway() -> Iterator[str]:
    with one_engine_gateway() as server:
        yield server.base_url


def run(gateway: str, *args: str, admin_key: str = ADMIN_KEY) -> tuple[int, str]:
    env = {"SLO_GATEWAY_URL": gateway, "SLO_GATEWAY_ADMIN_KEY": admin_key}
    result = CliRunner().invoke(cli, list(args), env=env)
    return result.exit_code, result.output


def works(gateway: str, key: str) -> int:
    headers = {"authorization": f"Bearer {key}"}
    body = chat_body(max_tokens=1)
    return httpx.post(gateway + "/v1/chat/completions", json=body, headers=headers).status_code


def test_a_keys_whole_life_from_the_command_line(gateway: str) -> None:
    code, out = run(gateway, "tenants", "create", "gamma", "--class", "batch", "--rpm", "100")
    assert code == 0 and "gamma" in out and "api" in out
    code, out = run(gateway, "keys", "create", "--tenant", "gamma", "--name", "ci")
    assert code == 0, out
    key_id = re.search(r"created (key_\w+)", out).group(1)  # type: ignore[union-attr]
    secret = re.search(r"store it now\): (\S+)", out).group(1)  # type: ignore[union-attr]
    assert works(gateway, secret) == 200
    code, out = run(gateway, "keys", "list", "--tenant", "gamma")
    assert code == 0 and key_id in out and secret not in out and secret[-4:] in out
    code, out = run(gateway, "keys", "rotate", key_id, "--grace-s", "600")
    graced = re.search(r"store it now\): (\S+)", out).group(1)  # type: ignore[union-attr]
    assert code == 0 and "old secret works until" in out
    assert works(gateway, secret) == 200 and works(gateway, graced) == 200
    code, out = run(gateway, "keys", "rotate", key_id)
    new_secret = re.search(r"store it now\): (\S+)", out).group(1)  # type: ignore[union-attr]
    assert code == 0 and works(gateway, secret) == 401 and works(gateway, graced) == 401
    assert works(gateway, new_secret) == 200
    code, out = run(gateway, "keys", "revoke", key_id)
    assert code == 0 and works(gateway, new_secret) == 401
    code, out = run(gateway, "tenants", "list")
    assert code == 0 and "gamma" in out and "config" in out
    code, out = run(gateway, "tenants", "delete", "gamma")
    assert code == 0 and "deleted" in out


def test_exit_codes_say_what_went_wrong(gateway: str) -> None:
    code, out = run(gateway, "keys", "create", "--tenant", "nobody")
    assert code == 1 and "param: tenant" in out
    assert run(gateway, "keys", "list", admin_key="")[0] == 2
    code, out = run(gateway, "keys", "list", admin_key="sk-not-the-admin")
    assert code == 1 and "401" in out
    assert run(f"http://127.0.0.1:{free_port()}", "keys", "list")[0] == 3

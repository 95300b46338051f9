"""Admin views (every GET route under /admin, and the dashboard) need the admin key: no key, a
tenant's key or a wrong key gets 401, and with no admin key configured nobody gets in. The
admin key never reaches a log line, whether sent right, wrong or in a URL. /metrics is open
unless `server.metrics_token_env` names a token, then it needs that token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fixtures.gateway import (
    ADMIN_KEY,
    METRICS_TOKEN,
    OTHER_TENANT_KEY,
    TENANT_KEY,
    config,
    endpoint,
    engine,
    fleet_member,
    gateway_for,
)
from tests.fixtures.processes import LoggedGateway
from tests.fixtures.servers import UvicornThread
from tests.fuzz.openai_errors import openai_error

pytestmark = pytest.mark.integration
REFUSED = [None, f"Bearer {TENANT_KEY}", f"Bearer {OTHER_TENANT_KEY}", "Bearer sk-guess"]


def admin_paths(server: UvicornThread) -> list[str]:
    """Every GET route under /admin that the app declares (so new ones are covered too)."""
    declared = httpx.get(server.base_url + "/openapi.json").json()["paths"]
    paths = [p for p, ops in declared.items() if p.startswith("/admin") and "get" in ops]
    assert "/admin/endpoints" in paths and "/admin/decisions" in paths
    return [*paths, "/dashboard"] if "/admin/dashboard.json" in paths else paths


@pytest.fixture(scope="module")
def engine_url() -> Iterator[str]:
    with fleet_member(engine()) as url:
        yield url


def get(url: str, authorization: str | None) -> httpx.Response:
    headers = {"authorization": authorization} if authorization else {}
    return httpx.get(url, headers=headers, timeout=10)


def test_admin_views_need_the_admin_key(engine_url: str) -> None:
    with gateway_for(engine_url) as server:
        for path in admin_paths(server):
            url = server.base_url + path
            for authorization in REFUSED:
                response = get(url, authorization)
                assert response.status_code == 401, (path, authorization)
                assert TENANT_KEY not in response.text and "acme" not in response.text
            # a templated path (/admin/keys/{key_id}) names no record: past the key, a 404
            expected = 404 if "{" in path else 200
            assert get(url, f"Bearer {ADMIN_KEY}").status_code == expected, path


def test_without_an_admin_key_configured_no_key_opens_the_admin_views(engine_url: str) -> None:
    with gateway_for(engine_url, server={"admin_key_env": None}) as server:
        for path in admin_paths(server):
            for authorization in [*REFUSED, f"Bearer {ADMIN_KEY}", "Bearer"]:
                response = get(server.base_url + path, authorization)
                assert response.status_code == 401, (path, authorization)


def test_metrics_can_require_a_bearer_token(engine_url: str) -> None:
    with gateway_for(engine_url, server={"metrics_token_env": "TEST_METRICS_TOKEN"}) as server:
        url = server.base_url + "/metrics"
        refused = [get(url, a) for a in [*REFUSED, f"Bearer {ADMIN_KEY}"]]
        scraped = get(url, f"Bearer {METRICS_TOKEN}")
    for response in refused:
        assert response.status_code == 401
        assert openai_error(401, response.headers["content-type"], response.json()) is None
        assert "slo_gateway_" not in response.text and "acme" not in response.text
    assert scraped.status_code == 200 and "slo_gateway_requests_total" in scraped.text


def test_metrics_are_open_by_default_as_prometheus_expects(engine_url: str) -> None:
    with gateway_for(engine_url) as server:
        assert get(server.base_url + "/metrics", None).status_code == 200


def test_no_admin_key_reaches_the_log_not_in_a_query_nor_a_wrong_guess(
    engine_url: str, tmp_path: Path
) -> None:
    """uvicorn's access log drops query strings, and `?key=` never signs in."""
    guess = "sk-guess-of-the-admin-key-31f7"
    with LoggedGateway(config([endpoint("e", engine_url)]), tmp_path) as gateway:
        url = gateway.base_url + "/dashboard"
        in_query = [httpx.get(url, params={"key": key}) for key in (ADMIN_KEY, guess)]
        forms = [httpx.post(url, data={"key": key}) for key in (ADMIN_KEY, guess)]
        api = httpx.get(gateway.base_url + "/v1/models", params={"api_key": guess})
        logs = gateway.stop()
    assert ADMIN_KEY not in logs and guess not in logs and "?" not in access_lines(logs)
    assert '"GET /dashboard HTTP/1.1" 401' in logs and '"POST /dashboard HTTP/1.1" 303' in logs
    assert [r.status_code for r in in_query] == [401, 401]
    assert all("set-cookie" not in r.headers for r in in_query)
    assert [r.status_code for r in forms] == [303, 401] and api.status_code == 401


def access_lines(logs: str) -> str:
    return "\n".join(line for line in logs.splitlines() if '"GET /' in line or '"POST /' in line)

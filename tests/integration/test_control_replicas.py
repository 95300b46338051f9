"""A key made, changed or revoked on one replica takes effect on the other within a second:
two gateways sharing one Redis, each with its own connection and its own control poller.

Propagation is timed from the record's own timestamp (`created_at`, `revoked_at`: taken just
before it is written) to the moment the other replica's keyring holds the change, on one
clock (both replicas run in this process); then the key's answer there is checked over HTTP.
Timing by HTTP answers alone would add a request's latency, over a second on a loaded
2-core test machine, to what is measured."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from functools import partial

import httpx
import pytest

from gateway.config.settings import Settings
from gateway.server.runtime import Runtime
from tests.fixtures.gateway import (
    ADMIN_KEY,
    chat_body,
    one_engine_config,
    running_gateway,
    runtime_of,
)

pytestmark = [pytest.mark.integration, pytest.mark.redis]
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
PROPAGATION_S = 1.0
ROUNDS = 10


@contextlib.contextmanager
def two_gateways(redis_url: str, key_prefix: str) -> Iterator[tuple[str, str, Runtime]]:
    """Two replicas' URLs and the second's runtime."""
    settings = Settings(redis_url=redis_url, redis_prefix=key_prefix, request_log=False)
    with (
        one_engine_config() as data,
        running_gateway(data, settings=settings) as a,
        running_gateway(data, settings=settings) as b,
    ):
        yield a.base_url, b.base_url, runtime_of(b)


def status_of(gateway: str, key: str, path: str = "/v1/models") -> tuple[int, str | None]:
    """The models listing checks the key and nothing else."""
    headers = {"authorization": f"Bearer {key}"}
    if path == "/v1/models":
        response = httpx.get(gateway + path, headers=headers, timeout=10)
    else:
        body = chat_body(max_tokens=1)
        response = httpx.post(gateway + path, json=body, headers=headers, timeout=10)
    code = response.json()["error"]["code"] if response.status_code != 200 else None
    return response.status_code, code


def holds(runtime: Runtime, key_id: str, *, revoked: bool = False) -> bool:
    """Whether the replica's keyring has the key (revoked, if asked)."""
    key = runtime.api.keys.get(key_id)
    return key is not None and (key.revoked_at is not None) == revoked


def applied_after(since_s: float, check: Callable[[], bool]) -> float:
    """Seconds from `since_s` (unix) until `check` holds (fails after 5 s)."""
    while not check():
        assert time.time() - since_s < 5.0, "the change never reached the other replica"
        time.sleep(0.002)
    return time.time() - since_s


def test_a_key_made_or_revoked_on_one_replica_holds_on_the_other_within_a_second(
    redis_url: str, key_prefix: str
) -> None:
    created_s, revoked_s = [], []
    with two_gateways(redis_url, key_prefix) as (a, b, other):
        for _ in range(ROUNDS):
            made = httpx.post(a + "/admin/keys", json={"tenant": "acme"}, headers=ADMIN).json()
            key, key_id = made["key"], made["id"]
            created_s.append(applied_after(made["created_at"], partial(holds, other, key_id)))
            assert status_of(b, key) == (200, None)
            revoked = httpx.post(f"{a}/admin/keys/{key_id}/revoke", headers=ADMIN).json()

            refused = partial(holds, other, key_id, revoked=True)
            revoked_s.append(applied_after(revoked["revoked_at"], refused))
            assert status_of(a, key) == status_of(b, key) == (401, "key_revoked")
    print(  # the figures docs/operations.md quotes (pytest -s shows them)
        f"propagation over {ROUNDS} rounds: create median {statistics.median(created_s):.3f} s"
        f" max {max(created_s):.3f} s; revoke median {statistics.median(revoked_s):.3f} s"
        f" max {max(revoked_s):.3f} s"
    )
    assert max(created_s) < PROPAGATION_S and max(revoked_s) < PROPAGATION_S


def test_a_keys_own_limit_is_exact_across_replicas(redis_url: str, key_prefix: str) -> None:
    with two_gateways(redis_url, key_prefix) as (a, b, other):
        body = {"tenant": "acme", "limits": {"requests_per_min": 3}}
        made = httpx.post(a + "/admin/keys", json=body, headers=ADMIN).json()
        applied_after(made["created_at"], partial(holds, other, made["id"]))
        chat = "/v1/chat/completions"
        statuses = [status_of(gateway, made["key"], chat)[0] for gateway in (a, b, a, b, a)]
    assert sorted(statuses) == [200, 200, 200, 429, 429]

"""Stored responses belong to the tenant that created them: a client never chooses a stored id
(vLLM names a response after a body `request_id`, so the gateway drops it), and an owner record
is never replaced by another tenant's request, in memory and over Redis."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import openai
import pytest

from tests.faults.shared_state import redis_gateway
from tests.fixtures.gateway import (
    OTHER_TENANT_KEY,
    PUBLIC_MODEL,
    TENANT_KEY,
    engine,
    eventually,
    fleet_config,
    one_engine_config,
    running_gateway,
    set_faults,
    tenants_with,
)

pytestmark = pytest.mark.integration
STORES = ["memory", pytest.param("redis", marks=pytest.mark.redis)]


@contextmanager
def gateway(store: str, request: pytest.FixtureRequest, **sections: Any) -> Iterator[str]:
    with one_engine_config(**sections) as data, served(store, data, request) as url:
        yield url


@contextmanager
def served(store: str, data: dict[str, Any], request: pytest.FixtureRequest) -> Iterator[str]:
    """A gateway for `data` on the memory store or on Redis; yields its URL."""
    if store == "memory":
        with running_gateway(data) as server:
            yield server.base_url
    else:
        redis_url = request.getfixturevalue("redis_url")
        prefix = request.getfixturevalue("key_prefix")
        with redis_gateway(data, redis_url, prefix) as url:
            yield url


def sdk(base_url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url + "/v1", api_key=key, max_retries=0)


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("stream", [False, True])
def test_another_tenant_cannot_take_over_a_stored_response_by_its_id(
    store: str, stream: bool, request: pytest.FixtureRequest
) -> None:
    with (
        gateway(store, request) as url,
        sdk(url, TENANT_KEY) as acme,
        sdk(url, OTHER_TENANT_KEY) as zeta,
    ):
        mine = acme.responses.create(model=PUBLIC_MODEL, input="acme's", max_output_tokens=3)
        taken = {"request_id": mine.id}  # vLLM's extra field: the id it gives the response
        if stream:
            with zeta.responses.create(
                model=PUBLIC_MODEL, input="zeta's", max_output_tokens=3, stream=True,
                extra_body=taken,
            ) as events:  # fmt: skip
                [theirs] = [e.response for e in events if e.type == "response.created"]
        else:
            theirs = zeta.responses.create(
                model=PUBLIC_MODEL, input="zeta's", max_output_tokens=3, extra_body=taken
            )
        assert theirs.id != mine.id
        assert acme.responses.retrieve(mine.id).id == mine.id
        items = httpx.get(
            f"{url}/v1/responses/{mine.id}/input_items",
            headers={"authorization": f"Bearer {TENANT_KEY}"},
        )
        assert "acme's" in items.text and "zeta's" not in items.text  # still acme's own
        with pytest.raises(openai.NotFoundError):
            zeta.responses.retrieve(mine.id)
        assert zeta.responses.retrieve(theirs.id).id == theirs.id


@pytest.mark.parametrize("store", STORES)
def test_a_tenant_keeps_its_newest_stored_responses_up_to_the_cap(
    store: str, request: pytest.FixtureRequest
) -> None:
    state = {"stored_responses_per_tenant": 2}
    with (
        gateway(store, request, state=state) as url,
        sdk(url, TENANT_KEY) as acme,
        sdk(url, OTHER_TENANT_KEY) as zeta,
    ):
        theirs = zeta.responses.create(model=PUBLIC_MODEL, input="zeta's", max_output_tokens=2)
        ids = [
            acme.responses.create(model=PUBLIC_MODEL, input=f"turn {i}", max_output_tokens=2).id
            for i in range(3)
        ]
        with pytest.raises(openai.NotFoundError):  # the oldest went first
            acme.responses.retrieve(ids[0])
        assert [acme.responses.retrieve(rid).id for rid in ids[1:]] == ids[1:]
        assert zeta.responses.retrieve(theirs.id).id == theirs.id  # a cap per tenant


@pytest.mark.parametrize("store", STORES)
def test_an_owner_lives_its_endpoints_retention(store: str, request: pytest.FixtureRequest) -> None:
    options = {"response_ttl_s": 0.5}
    with gateway(store, request, endpoint_options=options) as url, sdk(url, TENANT_KEY) as acme:
        stored = acme.responses.create(model=PUBLIC_MODEL, input="brief", max_output_tokens=2)
        assert acme.responses.retrieve(stored.id).id == stored.id
        time.sleep(0.7)
        with pytest.raises(openai.NotFoundError):
            acme.responses.retrieve(stored.id)


def test_stored_response_calls_count_against_requests_per_min(
    request: pytest.FixtureRequest,
) -> None:
    limited = tenants_with(acme={"limits": {"requests_per_min": 4}})
    with gateway("memory", request, tenants=limited) as url, sdk(url, TENANT_KEY) as acme:
        stored = acme.responses.create(model=PUBLIC_MODEL, input="x", max_output_tokens=2)
        acme.responses.retrieve(stored.id)
        acme.responses.input_items.list(stored.id)
        with pytest.raises(openai.NotFoundError):  # an unknown id counts too
            acme.responses.retrieve("resp_unknown")
        with pytest.raises(openai.RateLimitError) as limited_call:
            acme.responses.retrieve(stored.id)
        assert limited_call.value.code == "tenant_rate_limited"
        with pytest.raises(openai.RateLimitError):
            acme.responses.delete(stored.id)


@pytest.mark.parametrize("store", STORES)
def test_stored_response_calls_sharing_a_request_id_take_a_slot_each(
    store: str, request: pytest.FixtureRequest
) -> None:
    """Six calls at once with one client x-request-id, against max_concurrent 2, on an engine
    that holds them: two are held and four refused at once. Keyed by the client's id, the six
    shared one slot and all were let through. Their slots are back once they end."""
    limited = tenants_with(acme={"limits": {"max_concurrent": 2}})
    with (
        fleet_config({"e": engine()}, tenants=limited) as (data, urls),
        served(store, data, request) as url,
        sdk(url, TENANT_KEY) as acme,
    ):
        stored = acme.responses.create(model=PUBLIC_MODEL, input="x", max_output_tokens=2)
        engine_root = urls["e"]
        set_faults(engine_root, hang=True)
        headers = {"authorization": f"Bearer {TENANT_KEY}", "x-request-id": "same-id"}

        async def call(client: httpx.AsyncClient) -> int | None:
            try:
                answer = await client.get(f"{url}/v1/responses/{stored.id}", headers=headers)
            except httpx.TimeoutException:
                return None  # held by the engine: it took a slot
            assert answer.json()["error"]["code"] == "tenant_concurrency_limited"
            return answer.status_code

        async def six() -> list[int | None]:
            async with httpx.AsyncClient(timeout=2.0) as client:
                return await asyncio.gather(*(call(client) for _ in range(6)))

        outcomes = asyncio.run(six())
        assert sorted(outcomes, key=str) == [429, 429, 429, 429, None, None]
        set_faults(engine_root, hang=False)
        assert eventually(lambda: _retrieved(acme, stored.id))  # no slot leaked


def _retrieved(acme: openai.OpenAI, response_id: str) -> bool:
    try:
        return acme.responses.retrieve(response_id).id == response_id
    except openai.RateLimitError:
        return False


def test_a_background_response_is_refused_naming_the_field(
    request: pytest.FixtureRequest,
) -> None:
    with (
        gateway("memory", request) as url,
        sdk(url, TENANT_KEY) as acme,
        pytest.raises(openai.BadRequestError) as refused,
    ):
        acme.responses.create(model=PUBLIC_MODEL, input="x", background=True, max_output_tokens=2)
    assert refused.value.param == "background" and refused.value.code == "invalid_value"

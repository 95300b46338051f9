"""Stored responses (OpenAI Responses with `store`) and the endpoint that owns each.

A response created with `store` on an endpoint lives only there (vLLM keeps it in memory,
a provider in its own account), so the gateway remembers response id -> owner when the
response is created (its `response.created` event, or the whole answer), and again with the
tokens it took when it ends. `previous_response_id`, GET, DELETE, cancel and input_items go to
the owner and nowhere else: if the owner is no longer configured, or no longer has the response
(it restarted), the client gets a 404 that says so, never a silent reroute to an endpoint that
would answer without the conversation. Records are kept per tenant (an id names a response
only within the tenant that created it), never replaced by another write, and bounded: each
lives the endpoint's `response_ttl_s`, and a tenant keeps at most
`state.stored_responses_per_tenant`, the oldest evicted first (gateway/state/owners.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

from gateway.config.settings import STORED_RESPONSES_PER_TENANT, EndpointConfig
from gateway.state.owners import OwnerStore, owner_store_for
from gateway.state.store import StatsStore
from gateway.telemetry.record import Finished
from gateway.upstream.client import UpstreamCall
from policies.base import RouteRequest


@dataclass(frozen=True, slots=True)
class Owner:
    endpoint_id: str
    tenant: str  # only the tenant that created it may use it
    public_model: str
    upstream_model: str
    input_tokens: int  # the conversation so far, for the next turn's estimate
    output_tokens: int

    @property
    def context_tokens(self) -> int:
        """What a turn continuing this response replays before its own input."""
        return self.input_tokens + self.output_tokens


class ResponseOwners:
    def __init__(self, store: OwnerStore) -> None:
        self.store = store

    @classmethod
    def over(cls, stats: StatsStore, cap: int = STORED_RESPONSES_PER_TENANT) -> ResponseOwners:
        """Kept where the stats are, at most `cap` per tenant (the oldest go first)."""
        return cls(owner_store_for(stats, cap))

    async def remember(
        self,
        response_id: str,
        endpoint: EndpointConfig,
        call: UpstreamCall,
        request: RouteRequest,
        result: Finished | None = None,
        *,
        created: bool = True,
    ) -> None:
        """Note `endpoint` as the owner of a response just `created` (else: of one noted when
        it was created, now with its tokens); `result`, once known, gives the tokens it took.
        An id the tenant already has a live owner for keeps that owner."""
        if not endpoint.stores_responses:
            return
        owner = Owner(
            endpoint.id,
            request.tenant,
            call.model,
            endpoint.models[call.model],
            result.prompt_tokens if result else request.prompt_tokens,
            result.output_tokens if result else 0,
        )
        value = json.dumps(asdict(owner), separators=(",", ":"))
        await self.store.put(
            request.tenant,
            response_id,
            value,
            ttl_s=endpoint.response_ttl_s,
            now=time.time(),
            create=created,
        )

    async def find(self, tenant: str, response_id: str) -> Owner | None:
        value = await self.store.get(tenant, response_id, now=time.time())
        if value is None:
            return None
        try:
            return Owner(**json.loads(value))
        except (ValueError, TypeError):
            return None  # written by an incompatible version: unknown

    async def forget(self, tenant: str, response_id: str) -> None:
        await self.store.delete(tenant, response_id)

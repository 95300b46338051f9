"""Stored responses (OpenAI Responses with `store`) and the endpoint that owns each.

A response created with `store` on an endpoint lives only there (vLLM keeps it in memory,
a provider in its own account), so the gateway remembers response id -> owner when the
response is created (its `response.created` event, or the whole answer), and again with the
tokens it took when it ends. `previous_response_id`, GET, DELETE, cancel and input_items go to
the owner and nowhere else: if the owner is no longer configured, or no longer has the response
(it restarted), the client gets a 404 that says so, never a silent reroute to an endpoint that
would answer without the conversation. The record's TTL is the endpoint's `response_ttl_s`.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

from gateway.config.settings import EndpointConfig
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
    def over(cls, stats: StatsStore) -> ResponseOwners:
        return cls(owner_store_for(stats))

    async def remember(
        self,
        response_id: str,
        endpoint: EndpointConfig,
        call: UpstreamCall,
        request: RouteRequest,
        result: Finished | None = None,
    ) -> None:
        """Note `endpoint` as the owner; `result`, once known, gives the tokens it took."""
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
        await self.store.put(response_id, value, ttl_s=endpoint.response_ttl_s, now=time.time())

    async def find(self, response_id: str) -> Owner | None:
        value = await self.store.get(response_id, now=time.time())
        if value is None:
            return None
        try:
            return Owner(**json.loads(value))
        except (ValueError, TypeError):
            return None  # written by an incompatible version: unknown

    async def forget(self, response_id: str) -> None:
        await self.store.delete(response_id)

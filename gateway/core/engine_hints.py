"""A class's scheduling hints for the engines: vLLM's `priority`, OpenAI's `service_tier`.

An SLO class may set `engine_priority` (vLLM's request `priority`: lower runs first) and
`service_tier` (OpenAI's). For chat, completions, Responses and Messages requests (embeddings
and token counts pass as sent), `AiohttpUpstream._body` adds them to the body it already copies
for each attempt, so each endpoint of a failover gets only what it declares it takes:
- `priority` = the class's `engine_priority`, for endpoints with `priority_scheduling: true`;
- `service_tier` = the class's `service_tier`, for endpoints whose `service_tiers` is true or
  lists that tier.
A value the client set itself is kept, unless its tenant sets `enforce_class_priority`: then,
on the endpoints that take the field, the class's value replaces it, and a client's value is
dropped where the class sets none. Endpoints that do not take a field get the body as sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.config.settings import EndpointConfig, SloClassConfig, TenantSpec


@dataclass(frozen=True, slots=True)
class EngineHints:
    engine_priority: int | None
    service_tier: str | None
    enforce: bool  # the tenant's enforce_class_priority

    def apply(self, body: dict[str, Any], endpoint: EndpointConfig) -> None:
        """Add the hints `endpoint` takes to `body` (a copy of the client's), in place."""
        if endpoint.priority_scheduling:
            _put(body, "priority", self.engine_priority, self.enforce)
        tiers = endpoint.service_tiers
        if tiers is True or (tiers and self.service_tier in tiers):
            _put(body, "service_tier", self.service_tier, self.enforce)
        elif tiers and self.enforce:
            body.pop("service_tier", None)  # a tier this endpoint does not list


def _put(body: dict[str, Any], field: str, value: object, enforce: bool) -> None:
    if enforce:
        if value is None:
            body.pop(field, None)
        else:
            body[field] = value
    elif value is not None and body.get(field) is None:  # the client's own value stays
        body[field] = value


def hints_for(tenant: TenantSpec, klass: SloClassConfig) -> EngineHints | None:
    """The hints of one tenant's requests in one class; None when there is nothing to add."""
    enforce = tenant.enforce_class_priority
    if klass.engine_priority is None and klass.service_tier is None and not enforce:
        return None
    return EngineHints(klass.engine_priority, klass.service_tier, enforce)

"""Fallback chains across public models: which model serves a request its model cannot.

A model cannot serve a request for one of three reasons (`fallback_reason`, from the error
routing it raised):
    unavailable  none of its endpoints is in rotation, or the policy ranked none
    refused      admission refused it for this model (saturated, reserved for higher classes,
                 queue full, deadline unreachable, every endpoint rate limited, ...); never a
                 tenant's or a key's own limit or budget, which is about the caller, not the
                 model (those are checked once, before any model is tried)
    context      the prompt and max_tokens do not fit its context window (gateway/core/
                 context_window.py: estimated before sending, or the engine's 400)
The next model is the first not yet tried of the requested model's `context_fallbacks` once a
context failure was seen (a general fallback may be no larger), else of its `fallbacks`; both
lists hold only models the caller may use through its API (gateway/server/intake.py). None
left: the last error goes to the client. A request pinned to the endpoint that stored its
previous response never falls back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gateway.core.admission_control import TENANT_REASONS
from gateway.errors import ContextLengthExceeded, GatewayError, NoEndpointAvailable, Rejected


class FallbackReason(StrEnum):
    UNAVAILABLE = "unavailable"
    REFUSED = "refused"
    CONTEXT = "context"


_TENANT_REFUSALS = frozenset(reason.value for reason in TENANT_REASONS.values())
_UNAVAILABLE_CODES = frozenset({"no_endpoint_available", "no_endpoint"})


def fallback_reason(error: GatewayError) -> FallbackReason | None:
    """Why `error` lets another model serve the request (None: it does not)."""
    if isinstance(error, ContextLengthExceeded):
        return FallbackReason.CONTEXT
    if isinstance(error, NoEndpointAvailable) and error.code in _UNAVAILABLE_CODES:
        return FallbackReason.UNAVAILABLE
    if isinstance(error, Rejected) and error.reason not in _TENANT_REFUSALS:
        return FallbackReason.REFUSED
    return None


@dataclass(slots=True)
class FallbackChain:
    """The models tried for one request, the requested one first."""

    requested: str
    fallbacks: tuple[str, ...] = ()
    context_fallbacks: tuple[str, ...] = ()
    context_seen: bool = False
    tried: set[str] = field(init=False)

    def __post_init__(self) -> None:
        self.tried = {self.requested}

    def next(self, reason: FallbackReason) -> str | None:
        """The model to try after the current one failed for `reason` (None: none left)."""
        self.context_seen = self.context_seen or reason == FallbackReason.CONTEXT
        chain = self.context_fallbacks if self.context_seen else self.fallbacks
        found = next((model for model in chain if model not in self.tried), None)
        if found is not None:
            self.tried.add(found)
        return found

"""A request in flight through the offline simulator: its ranking, its attempts so far, and
what its current attempt has delivered."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gateway.core.progress import StreamProgress
from policies.base import Prediction, RouteRequest


@dataclass(slots=True)
class Flight:
    index: int  # in the plan
    route: RouteRequest
    order: tuple[str, ...]
    decision: str = ""  # the policy's reason for the order
    routed_s: float = 0.0  # when admission let it through (it waited from arrival to then)
    predictions: tuple[Prediction, ...] = ()  # the policy's, one per endpoint of `order`
    attempt: int = 0
    endpoint_id: str = ""
    sent_s: float = 0.0  # when the current attempt started
    first_s: float | None = None
    limit_headers: Mapping[str, str] | None = None  # a provider's, on its response
    cached: int | None = None  # prompt tokens its engine found in its prefix cache
    progress: StreamProgress = field(default_factory=StreamProgress)  # an engine's stream

    @property
    def predicted(self) -> Prediction | None:
        """The prediction for the current attempt's endpoint (None: the policy made none)."""
        if not self.predictions:
            return None
        return self.predictions[(self.attempt - 1) % len(self.order)]

"""The endpoints a request may go to now, as the immutable snapshots admission and policies see.

Shared by the live router (`Router.snapshots`, on the wall clock) and the offline simulator (on
its virtual clock): no clock of its own and no I/O, only this replica's local state. An endpoint
is in rotation when neither this replica's registry nor the shared store has it cooling down
and its shared breaker is closed. Each snapshot fuses the view's in-flight count (other
replicas' leases as of the last refresh plus this replica's, counted now) with the latest
scraped engine gauges and their age. What a policy returns is kept only where it names real,
distinct candidates (`only_candidates`), so no policy can route outside them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from gateway.state.view import SharedView
from gateway.watch.endpoints import Registry
from policies.base import EndpointSnapshot, EngineSignals, Ranking

Signals = Callable[[str], EngineSignals | None]  # an endpoint's latest scraped signals


def candidate_snapshots(
    registry: Registry, view: SharedView, signals: Signals, model: str, now: float
) -> list[EndpointSnapshot]:
    """One snapshot per endpoint of `model` that is in rotation at `now`."""
    found = []
    shared_of, in_flight_of, local_tokens = view.shared, view.in_flight, view.local_tokens
    available = registry.available
    for endpoint in registry.serving(model):
        endpoint_id = endpoint.id
        stats = shared_of(endpoint_id)  # cool-down and breaker, as `view.stats` has them
        if available(endpoint_id, now) and stats.available(now):
            price = endpoint.price
            # Positional (EndpointSnapshot's field order): built per endpoint per request,
            # where keywords cost about a third more.
            found.append(
                EndpointSnapshot(
                    endpoint_id,
                    endpoint.kind,
                    True,
                    in_flight_of(endpoint_id, stats),
                    local_tokens[endpoint_id],
                    endpoint.max_concurrency,
                    price.input_per_1m,
                    price.output_per_1m,
                    signals(endpoint_id),
                    stats.latency,
                )
            )
    return found


def next_available_in_s(registry: Registry, view: SharedView, model: str, now: float) -> float:
    """Seconds until the first endpoint of `model` leaves its cool-down or open breaker:
    the Retry-After a client is told when none is in rotation (1 s when unknown)."""
    waits = []
    for endpoint in registry.serving(model):
        stats = view.stats(endpoint.id)
        until_s = max(
            registry.state(endpoint.id).cooldown_until_s,
            stats.cooldown_until_s,
            stats.breaker.open_until_s,
        )
        waits.append(until_s - now)
    soonest = min(waits, default=0.0)
    return soonest if soonest > 0 else 1.0


def only_candidates(ranking: Ranking, allowed: set[str]) -> Ranking:
    """The ranking with endpoints outside `allowed`, and repeats, removed."""
    seen: set[str] = set()
    kept = []
    for snapshot in ranking.endpoints:
        if snapshot.endpoint_id in allowed and snapshot.endpoint_id not in seen:
            seen.add(snapshot.endpoint_id)
            kept.append(snapshot)
    return replace(ranking, endpoints=tuple(kept))

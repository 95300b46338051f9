"""The endpoints a request may go to now, as the immutable snapshots admission and policies see.

Called by the decision pipeline (gateway/core/decision_pipeline.py), so the live router (on the
wall clock) and the offline simulator (on its virtual clock) take the same snapshots: no clock
of its own and no I/O, only this replica's local state. An endpoint is in rotation when neither
this replica's registry nor the shared store has it cooling down and its shared breaker is
closed. Each snapshot fuses the view's in-flight count (other replicas' leases as of the last
refresh plus this replica's, counted now) with the latest scraped engine gauges and their age.
What a policy returns is kept only where it names real, distinct candidates
(`only_candidates`), so no policy can route outside them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gateway.config.settings import Api, EndpointConfig
from gateway.state.store import EndpointStats
from gateway.state.view import SharedView
from gateway.watch.endpoints import Registry
from policies.base import EndpointSnapshot, EngineSignals, Ranking

Signals = Callable[[str], EngineSignals | None]  # an endpoint's latest scraped signals


def candidate_snapshots(
    registry: Registry,
    view: SharedView,
    signals: Signals,
    model: str,
    now: float,
    api: Api = "chat",
) -> list[EndpointSnapshot]:
    """One snapshot per endpoint serving `model` through `api` that is in rotation at `now`."""
    found = []
    shared_of, in_flight_of, local_tokens = view.shared, view.in_flight, view.local_tokens
    local_prefill = view.local_prefill
    available = registry.available
    for endpoint in registry.serving(model, api):
        endpoint_id = endpoint.id
        stats = shared_of(endpoint_id)  # cool-down and breaker, as `view.stats` has them
        if available(endpoint_id, now) and stats.available(now):
            in_flight = in_flight_of(endpoint_id, stats)
            found.append(snapshot(endpoint, in_flight, local_tokens, signals, stats, local_prefill))
    return found


def snapshot(
    endpoint: EndpointConfig,
    in_flight: int,
    local_tokens: Mapping[str, int],
    signals: Signals,
    stats: EndpointStats,
    local_prefill: Mapping[str, int],
) -> EndpointSnapshot:
    """What a policy sees of one endpoint: config, the fused in-flight count, this replica's
    in-flight tokens and their prefill still to come, the latest scrape and the shared latency
    statistics."""
    price = endpoint.price
    # Positional (EndpointSnapshot's field order): built per endpoint per request, where
    # keywords cost about a third more.
    return EndpointSnapshot(
        endpoint.id,
        endpoint.kind,
        in_flight,
        local_tokens[endpoint.id],
        endpoint.max_concurrency,
        price.input_per_1m,
        price.output_per_1m,
        signals(endpoint.id),
        stats.latency,
        price.cached_input_rate,
        local_prefill[endpoint.id],
    )


def rotation_phase(registry: Registry, view: SharedView, endpoint_id: str, now: float) -> str:
    """Why an endpoint is in rotation or not: `available` exactly when `candidate_snapshots`
    takes it, else the registry's cool-down reason, `cooling_down` (a shared cool-down) or
    `breaker_<phase>`."""
    state = registry.state(endpoint_id)
    if not state.available(now):
        return state.cooldown_reason or "cooling_down"
    stats = view.shared(endpoint_id)
    if stats.cooldown_until_s > now:
        return "cooling_down"
    breaker = stats.breaker.phase(now)
    return "available" if breaker == "closed" else f"breaker_{breaker}"


def next_available_in_s(
    registry: Registry, view: SharedView, model: str, now: float, api: Api = "chat"
) -> float:
    """Seconds until the first endpoint of `model` (through `api`) leaves its cool-down or open
    breaker: the Retry-After a client is told when none is in rotation (1 s when unknown)."""
    waits = []
    for endpoint in registry.serving(model, api):
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
    for index, snapshot in enumerate(ranking.endpoints):
        if snapshot.endpoint_id in allowed and snapshot.endpoint_id not in seen:
            seen.add(snapshot.endpoint_id)
            kept.append(index)
    if len(kept) == len(ranking.endpoints):
        return ranking  # the common case: nothing removed (no copy)
    predictions = ranking.predictions
    return ranking._replace(
        endpoints=tuple(ranking.endpoints[i] for i in kept),
        predictions=tuple(predictions[i] for i in kept) if predictions else (),
    )

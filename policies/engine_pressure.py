"""What an engine's own signals say about its load: read alike by admission and the estimate,
and the estimate's fused load (gateway leases with the engine's gauges, `fused_load`).

Queue: `waiting_for_capacity` (vLLM's `num_requests_waiting_by_reason{reason="capacity"}`:
waiting for the engine's batch slots or KV blocks) when the engine reports it, else `waiting`.
Requests `deferred` on something else (a LoRA budget, a KV transfer) say nothing of the
engine's load.

Preemption: `preemptions_per_s`, the rate of the engine's preemption counter over the
scraper's rate window (never the counter itself). An engine preempts when a running sequence
needs a KV block and none is free, so a preempting engine is saturated whatever its KV gauge
says (each preemption frees its victim's blocks, so the gauge drops just as the engine is
over-committed).
    admission  pressure ≥ preemptions_per_s / preemption_threshold_per_s (policies/admission.py;
               the default 0.5 /s is one preemption in the scraper's default 2 s window)
    estimate   a preempted request goes back to the head of the queue and is prefilled again.
               With p = trust · preemptions_per_s and s̄ = one typical prefill (a + b·P̄), while
               this request waits T, p·T of them land ahead of it: T = queued·s̄ + p·T·s̄, so
               wait = queued·s̄ · stretch, stretch = 1 / (1 − min(MAX_RECOMPUTE_SHARE, p·s̄))
               (policies/estimate.py).
"""

from __future__ import annotations

from typing import NamedTuple

from policies.base import EndpointSnapshot
from policies.estimate_params import EndpointFit

_new_tuple = tuple.__new__
MAX_RECOMPUTE_SHARE = 0.9  # the engine's time spent re-prefilling victims, at most (stretch 10)


def recompute_stretch(preemptions_per_s: float, service_s: float) -> float:
    """How much longer a queue takes to drain while the engine preempts (see above)."""
    share = preemptions_per_s * service_s
    return 1.0 / (1.0 - (share if share < MAX_RECOMPUTE_SHARE else MAX_RECOMPUTE_SHARE))


class Load(NamedTuple):
    """The fused load on one endpoint (policies/estimate.py, "Load")."""

    queued: float
    running: float
    trust: float  # in the engine's gauges, by their age
    stretch: float  # how much slower the queue drains while the engine preempts


def fused_load(snapshot: EndpointSnapshot, fit: EndpointFit, half_life_s: float) -> Load:
    """Gateway leases fused with the engine's gauges, as trusted as they are fresh."""
    in_flight, limit = snapshot.in_flight, snapshot.max_concurrency
    slots = limit or fit.prior_slots
    queued, running = 0.0, float(in_flight)
    if slots is not None and in_flight > slots:
        queued, running = float(in_flight - slots), float(slots)
    engine = snapshot.engine
    if engine is None or engine.age_s is None:
        return _new_tuple(Load, (queued, running, 0.0, 1.0))
    trust = 0.5 ** (engine.age_s / half_life_s) if engine.age_s > 0 else 1.0
    waiting = engine.waiting if engine.waiting_for_capacity is None else engine.waiting_for_capacity
    if waiting is not None:  # moved towards the gauge as far as it is trusted
        queued += trust * (waiting - queued)
    if engine.running is not None:
        running += trust * (engine.running - running)
    if limit:  # leases beyond a concurrency limit wait whatever the gauges say
        queued = max(queued, float(in_flight - limit))
    preempting = engine.preemptions_per_s
    stretch = recompute_stretch(trust * preempting, fit.mean_service_s) if preempting else 1.0
    return _new_tuple(Load, (queued, running, trust, stretch))  # as Prediction: estimate.py

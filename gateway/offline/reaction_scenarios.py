"""Scenarios that measure how fast routing reacts: a burst, then an engine slowed 3x mid-run.

    reaction   three engines (fast, mid, slow) and two providers; interactive chat at 6 req/s
               with a 2.5x burst from 8 s to 13 s, and `vllm-a`, the engine that takes most
               interactive traffic, slowed 3x (`slowdown` fault) from 18 s to the end (30 s);
               `reaction(stream=False)`, offline only, asks the same requests for whole
               answers, which the gateway sees only as each ends
Phases by arrival (`PHASES`, for `benchmarks/reaction.py`): warm-up [0, 4) (every endpoint
cold), steady [4, 8) and [13, 15), burst [8, 13), the run-up [15, 18) (requests still
streaming when the slowdown strikes: no routing can save those), after the slowdown [18, 30).
The time from the slowdown to the last interactive request sent to the slowed engine says how
long the gateway kept trusting stale statistics.
"""

from __future__ import annotations

from gateway.offline.scenario import EngineSpec, FaultEvent, Scenario, Traffic
from gateway.offline.scenario_kit import (
    CHAT_OUTPUT,
    CHAT_PROMPT,
    CLASSES,
    provider,
    scenario_tenants,
)
from gateway.offline.workload import RateShape
from gateway.sim.engine import EngineServerParams
from gateway.sim.fleet import MemberPrice

SLOWED = "vllm-a"
SLOWDOWN_AT_S = 18.0
BURST_S = (8.0, 13.0)
END_S = 30.0
PHASES = {
    "warmup": ((0.0, 4.0),),
    "steady": ((4.0, BURST_S[0]), (BURST_S[1], SLOWDOWN_AT_S - 3.0)),
    "burst": (BURST_S,),
    "run_up": ((SLOWDOWN_AT_S - 3.0, SLOWDOWN_AT_S),),
    "after_slowdown": ((SLOWDOWN_AT_S, END_S),),
}
# vllm-a decodes a step in 20 ms + 0.3 ms per sequence: 3x slower, it misses a 60 ms TPOT at
# any load, so every interactive request it gets after the slowdown is one the gateway lost.
_FAST = {"step_base_s": 0.02, "per_seq_s": 0.0003, "prefill_per_token_s": 0.0002}
_MID = {"step_base_s": 0.025, "per_seq_s": 0.0004, "prefill_per_token_s": 0.00025}
_SLOW = {"step_base_s": 0.03, "per_seq_s": 0.0006, "prefill_per_token_s": 0.0005}


def _engine(member_id: str, price_in: float, max_num_seqs: int, **params: float) -> EngineSpec:
    return EngineSpec(
        id=member_id,
        params=EngineServerParams(max_num_seqs=max_num_seqs, **params),
        price=MemberPrice(input_per_1m=price_in, output_per_1m=2 * price_in),
    )


def reaction(stream: bool = True) -> Scenario:
    """The scenario; `stream=False` (offline only) asks every answer whole."""
    base, peak = 6.0, 15.0
    start, end = BURST_S
    shape = RateShape.spike(base=base, peak=peak, at_s=start, length_s=end - start, end_s=END_S)
    traffic = Traffic(
        tenant="app",
        slo_class="interactive",
        shape=shape,
        prompt=CHAT_PROMPT,
        output=CHAT_OUTPUT,
        stream=stream,
    )
    return Scenario(
        name="reaction" if stream else "reaction_whole",
        description=(
            f"Chat{'' if stream else ' (whole answers)'} at 6 req/s with a 2.5x burst (8-13 s) on "
            f"three engines and two providers; {SLOWED} slows 3x from {SLOWDOWN_AT_S:g} s."
        ),
        duration_s=END_S,
        classes=CLASSES,
        tenants=scenario_tenants(app=["interactive"]),
        traffic=[traffic],
        engines=[
            _engine(SLOWED, 0.03, 16, **_FAST),
            _engine("vllm-b", 0.04, 16, **_MID),
            _engine("vllm-c", 0.05, 16, **_SLOW),
        ],
        providers=[
            provider("provider-fast", 0.12, 0.20, 0.60, 24),
            provider("provider-cheap", 0.35, 0.10, 0.30, 24),
        ],
        faults=[FaultEvent(at_s=SLOWDOWN_AT_S, member=SLOWED, patch={"slowdown": 3.0})],
        recovery_from_s=SLOWDOWN_AT_S,
    )

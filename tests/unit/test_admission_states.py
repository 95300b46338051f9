"""`admission_states` (one pass) equals the states written out from the pressure's definition
in policies/admission.py's docstring: each endpoint's next state by hysteresis from its
previous one, and the state a request's footprint would find it in, never below that."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from policies.admission import (
    AdmissionParams,
    Saturation,
    admission_states,
    next_saturations,
    request_states,
    saturation_for,
)
from policies.base import EndpointSnapshot, EngineSignals

PARAMS = AdmissionParams()
OPEN = Saturation.OPEN
# half its pool in use: a request of 500 of its 1,000 tokens would push it over the KV threshold
HALF_FULL = EndpointSnapshot(
    "e0", "vllm", engine=EngineSignals(kv_usage=0.5, kv_capacity_tokens=1000, age_s=1.0)
)


@st.composite
def snapshots(draw: st.DrawFn, endpoint_id: str) -> EndpointSnapshot:
    engine = None
    if draw(st.booleans()):
        engine = EngineSignals(
            waiting=draw(st.none() | st.floats(0, 12)),
            kv_usage=draw(st.none() | st.floats(0, 1.2)),
            waiting_for_capacity=draw(st.none() | st.floats(0, 12)),
            kv_capacity_tokens=draw(st.none() | st.integers(1_000, 200_000)),
            age_s=draw(st.none() | st.floats(0, 20)),
            preemptions_per_s=draw(st.none() | st.floats(0, 2)),
        )
    return EndpointSnapshot(
        endpoint_id,
        "vllm",
        in_flight=draw(st.integers(0, 80)),
        in_flight_tokens=draw(st.integers(0, 60_000)),
        max_concurrency=draw(st.none() | st.integers(1, 64)),
        engine=engine,
    )


def plain_pressure(snapshot: EndpointSnapshot, footprint_tokens: int) -> float:
    """The largest of the docstring's terms; the request's footprint added to the KV in use."""
    p, levels = PARAMS, [0.0]
    if snapshot.max_concurrency:
        levels.append(snapshot.in_flight / (snapshot.max_concurrency * p.in_flight_threshold))
    engine = snapshot.engine
    if engine is None or engine.age_s is None or engine.age_s > p.max_gauge_age_s:
        return max(levels)
    if engine.kv_usage is not None:
        used, capacity = engine.kv_usage, engine.kv_capacity_tokens
        if capacity:
            used = max(used, snapshot.in_flight_tokens / capacity) + footprint_tokens / capacity
        levels.append(used / p.kv_threshold)
    waiting = engine.waiting if engine.waiting_for_capacity is None else engine.waiting_for_capacity
    if waiting is not None:
        levels.append(waiting / p.queue_threshold)
    if engine.preemptions_per_s:
        levels.append(engine.preemptions_per_s / p.preemption_threshold_per_s)
    return max(levels)


@settings(max_examples=400, deadline=None)
@given(
    st.integers(1, 8).flatmap(lambda n: st.tuples(*(snapshots(f"e{i}") for i in range(n)))),
    st.lists(st.sampled_from(list(Saturation)), min_size=8, max_size=8),
    st.integers(0, 50_000),
)
@example((HALF_FULL,), [OPEN] * 8, 500)
def test_one_pass_equals_the_states_from_the_pressure_definition(
    pool: tuple[EndpointSnapshot, ...], previous_states: list[Saturation], footprint: int
) -> None:
    previous = {s.endpoint_id: state for s, state in zip(pool, previous_states, strict=False)}
    states, found = admission_states(previous, pool, footprint, PARAMS)
    for snapshot in pool:
        key = snapshot.endpoint_id
        now = saturation_for(previous[key], plain_pressure(snapshot, 0), PARAMS)
        alone = saturation_for(OPEN, plain_pressure(snapshot, footprint), PARAMS)
        assert states[key] == now
        assert found[key] == max(now, alone)
    # and the two-pass path it replaces in AdmissionControl gives the same
    assert states == next_saturations(previous, pool, PARAMS)
    assert found == request_states(states, pool, footprint, PARAMS)

"""The clock-free replica model, driven in virtual time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.sim.model import EngineModel, EngineParams, PromptTooLong


def run(model: EngineModel) -> tuple[dict[str, list[float]], dict[str, list[int]]]:
    """Step until idle; per request, the virtual times and indices of its tokens."""
    now_s = 0.0
    times: dict[str, list[float]] = {}
    indices: dict[str, list[int]] = {}
    for _ in range(100_000):
        if not model.has_work:
            return times, indices
        result = model.step()
        now_s += result.duration_s
        for req_id, index in result.tokens_emitted:
            times.setdefault(req_id, []).append(now_s)
            indices.setdefault(req_id, []).append(index)
    raise AssertionError("the model never went idle")


def ttft_s(params: EngineParams, prompt_tokens: int) -> float:
    model = EngineModel(params)
    model.submit("r", prompt_tokens, 1)
    times, _ = run(model)
    return times["r"][0]


def test_default_engine_is_in_the_briefed_latency_range() -> None:
    model = EngineModel(EngineParams())
    model.submit("r", 100, 20)
    times, _ = run(model)
    gaps = [b - a for a, b in zip(times["r"], times["r"][1:], strict=False)]
    assert 0.030 <= times["r"][0] <= 0.060
    assert all(0.015 <= gap <= 0.030 for gap in gaps)


def test_ttft_rises_with_prompt_length() -> None:
    params = EngineParams()
    short, medium, long = (ttft_s(params, n) for n in (100, 1000, 4000))
    assert short < medium < long
    assert long > 4 * medium  # linear cost alone would give < 4x: the quadratic term shows


def test_ttft_rises_with_queued_prefill_work() -> None:
    params = EngineParams(max_num_batched_tokens=1024)
    alone = ttft_s(params, 100)
    model = EngineModel(params)
    for i in range(4):
        model.submit(f"ahead-{i}", 2000, 4)
    model.submit("r", 100, 1)
    times, _ = run(model)
    assert times["r"][0] > 5 * alone


def test_tpot_rises_with_batch_size() -> None:
    def tpot_s(batch: int) -> float:
        model = EngineModel(EngineParams())
        for i in range(batch):
            model.submit(f"r{i}", 500, 10)
        times, _ = run(model)
        return (times["r0"][-1] - times["r0"][1]) / 8

    assert tpot_s(1) < tpot_s(16) < tpot_s(64)


def test_batch_is_capped_by_max_num_seqs() -> None:
    model = EngineModel(EngineParams(max_num_seqs=4))
    for i in range(10):
        model.submit(f"r{i}", 50, 5)
    result = model.step()
    snap = model.snapshot()
    assert len(result.tokens_emitted) == 4
    assert (snap.running, snap.waiting, snap.waiting_capacity) == (4, 6, 6)


def test_requests_wait_for_kv_blocks_in_fcfs_order() -> None:
    params = EngineParams(num_gpu_blocks=10, max_model_len=160, max_num_seqs=8)
    model = EngineModel(params)
    model.submit("a", 64, 2)  # 4 blocks
    model.submit("b", 64, 2)  # 4 blocks
    model.submit("c", 64, 2)  # does not fit next to a and b
    model.submit("d", 16, 2)  # would fit, but FCFS keeps it behind c
    model.step()
    snap = model.snapshot()
    assert (snap.running, snap.waiting_capacity) == (2, 2)
    assert snap.kv_usage == pytest.approx(0.8)
    _, indices = run(model)
    assert all(indices[r] == [0, 1] for r in "cd")


def test_kv_exhaustion_preempts_and_every_request_still_completes() -> None:
    params = EngineParams(num_gpu_blocks=10, max_model_len=160, max_num_seqs=8)
    model = EngineModel(params)
    for name in "abc":
        model.submit(name, 48, 60)  # 3 blocks at admission, 7 blocks at the end
    _, indices = run(model)
    snap = model.snapshot()
    assert snap.preemptions_total >= 1
    assert all(indices[name] == list(range(60)) for name in "abc")
    assert snap.used_blocks == 0
    assert snap.generation_tokens_total == 180
    assert snap.prompt_tokens_total == 3 * 48


def test_preemption_evicts_the_newest_sequence() -> None:
    params = EngineParams(num_gpu_blocks=6, max_model_len=96, max_num_seqs=8)
    model = EngineModel(params)
    model.submit("old", 32, 40)
    model.submit("new", 32, 40)
    preempted: list[str] = []
    while model.has_work:
        preempted += model.step().preempted
    assert preempted and set(preempted) == {"new"}


def test_cancel_frees_blocks_and_stops_tokens() -> None:
    model = EngineModel(EngineParams())
    model.submit("a", 320, 100)
    model.submit("b", 32, 3)
    model.step()
    assert model.snapshot().used_blocks == 22
    assert model.cancel("a") is True
    assert model.snapshot().used_blocks == 2
    _, indices = run(model)
    assert "a" not in indices
    assert model.cancel("a") is False


def test_cancel_removes_a_waiting_request() -> None:
    model = EngineModel(EngineParams(max_num_seqs=1))
    model.submit("a", 10, 5)
    model.submit("b", 10, 5)
    model.step()
    assert model.cancel("b") is True
    assert model.snapshot().waiting == 0


def test_slowdown_multiplies_step_durations() -> None:
    normal, slow = EngineModel(EngineParams()), EngineModel(EngineParams())
    slow.slowdown = 3.0
    for model in (normal, slow):
        model.submit("r", 100, 1)
    assert slow.step().duration_s == pytest.approx(3 * normal.step().duration_s)


def test_idle_step_takes_no_time() -> None:
    result = EngineModel(EngineParams()).step()
    assert result.duration_s == 0.0 and not result.tokens_emitted


def test_rejects_requests_longer_than_the_context() -> None:
    model = EngineModel(EngineParams(max_model_len=1000))
    with pytest.raises(PromptTooLong):
        model.submit("r", 900, 101)


def test_params_reject_a_context_larger_than_the_pool() -> None:
    with pytest.raises(ValueError, match="KV pool"):
        EngineParams(num_gpu_blocks=10, max_model_len=1000)


def chain(name: str, blocks: int) -> tuple[int, ...]:
    return tuple(hash((name, i)) for i in range(blocks))


@settings(max_examples=80, deadline=None)
@given(
    requests=st.lists(
        st.tuples(
            st.integers(1, 100), st.integers(1, 60), st.none() | st.integers(0, 3), st.booleans()
        ),
        min_size=1,
        max_size=30,
    ),
    num_gpu_blocks=st.integers(10, 40),
    max_num_seqs=st.integers(1, 8),
    budget=st.integers(1, 256),
    prefix_caching=st.booleans(),
)
def test_invariants_hold_for_any_workload(
    requests: list[tuple[int, int, int | None, bool]],
    num_gpu_blocks: int,
    max_num_seqs: int,
    budget: int,
    prefix_caching: bool,
) -> None:
    params = EngineParams(
        num_gpu_blocks=num_gpu_blocks,
        max_model_len=160,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=budget,
        enable_prefix_caching=prefix_caching,
    )
    model = EngineModel(params)
    for i, (prompt, output, group, _) in enumerate(requests):
        # A group's requests share their first two blocks, then differ; None: no hashes.
        own = chain(f"r{i}", (prompt + output) // 16)
        hashes = () if group is None else chain(f"g{group}", 2) + own
        model.submit(f"r{i}", prompt, output, hashes)
    cancel_at = {f"r{i}": 3 * i for i, (*_, cancel) in enumerate(requests) if cancel}
    indices: dict[str, list[int]] = {}
    for step in range(20_000):
        if not model.has_work:
            break
        for req_id in [r for r, at in cancel_at.items() if at == step]:
            model.cancel(req_id)
        result = model.step()
        snap = model.snapshot()
        assert snap.running <= max_num_seqs and 0 <= snap.used_blocks <= num_gpu_blocks
        assert result.duration_s >= 0
        for req_id, index in result.tokens_emitted:
            indices.setdefault(req_id, []).append(index)
    snap = model.snapshot()
    assert not model.has_work and snap.used_blocks == 0
    assert snap.prefix_cache_hits_total <= snap.prefix_cache_queries_total
    for i, (_, output, _, _) in enumerate(requests):
        got = indices.get(f"r{i}", [])
        assert got == list(range(len(got)))  # in order, never repeated after a preemption
        if f"r{i}" not in cancel_at:
            assert len(got) == output

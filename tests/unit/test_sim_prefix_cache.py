"""The replica model's prefix cache: hits, sharing, eviction order, answers cached for the
next turn, preemption; driven in virtual time like `test_sim_model.py`."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.sim.model import EngineModel, EngineParams
from gateway.sim.prompt_blocks import sequence_hashes
from gateway.sim.wire import engine_prompt_tokens, output_text, prompt_text

BS = 16  # EngineParams' default block size


def chain(name: str, blocks: int) -> tuple[int, ...]:
    """Distinct stand-in hashes, as the offline simulator may pass them: name's blocks 0..n-1."""
    return tuple(hash((name, i)) for i in range(blocks))


def serve(
    model: EngineModel, req_id: str, prompt: int, output: int, hashes: Sequence[int] = ()
) -> tuple[int, float]:
    """Run one request to its end on an otherwise idle model: (cached tokens, TTFT in s)."""
    model.submit(req_id, prompt, output, hashes)
    cached, now_s, first_s = 0, 0.0, None
    while model.has_work:
        result = model.step()
        now_s += result.duration_s
        cached += sum(tokens for r, tokens in result.prefix_hits if r == req_id)
        if first_s is None and any(r == req_id for r, _ in result.tokens_emitted):
            first_s = now_s
    assert first_s is not None
    return cached, first_s


def test_a_repeated_prompt_hits_all_but_its_last_block_and_is_faster() -> None:
    model = EngineModel(EngineParams())
    hashes = chain("doc", 62)  # 1000 tokens: 62 full blocks
    cold, cold_ttft_s = serve(model, "a", 1000, 4, hashes)
    warm, warm_ttft_s = serve(model, "b", 1000, 4, hashes)
    assert (cold, warm) == (0, 992)  # (1000 - 1) // 16 blocks: the last token is computed again
    assert warm_ttft_s < cold_ttft_s / 5
    snap = model.snapshot()
    assert (snap.prefix_cache_queries_total, snap.prefix_cache_hits_total) == (2000, 992)


def test_a_fully_cached_prompt_still_computes_its_last_token() -> None:
    model = EngineModel(EngineParams())
    hashes = chain("exact", 4)  # 64 tokens, exactly 4 blocks
    serve(model, "a", 64, 1, hashes)
    assert serve(model, "b", 64, 1, hashes)[0] == 48


def test_a_shared_prefix_of_k_blocks_hits_exactly_k_blocks() -> None:
    model = EngineModel(EngineParams())
    shared = chain("system", 5)
    serve(model, "a", 200, 2, shared + chain("a", 7))
    assert serve(model, "b", 200, 2, shared + chain("b", 7))[0] == 5 * BS


def test_requests_without_hashes_never_hit() -> None:
    model = EngineModel(EngineParams())
    serve(model, "a", 500, 2)
    assert serve(model, "b", 500, 2)[0] == 0
    assert model.snapshot().prefix_cache_queries_total == 1000


def test_off_means_no_hits_and_no_counts() -> None:
    model = EngineModel(EngineParams(enable_prefix_caching=False))
    hashes = chain("doc", 62)
    _, cold_ttft_s = serve(model, "a", 1000, 4, hashes)
    cached, warm_ttft_s = serve(model, "b", 1000, 4, hashes)
    snap = model.snapshot()
    assert cached == 0 and warm_ttft_s == cold_ttft_s
    assert (snap.prefix_cache_queries_total, snap.prefix_cache_hits_total) == (0, 0)
    assert snap.enable_prefix_caching is False


def test_running_requests_hold_a_common_prefix_once() -> None:
    def used_blocks(params: EngineParams) -> int:
        model = EngineModel(params)
        shared = chain("system", 8)
        model.submit("a", 160, 50, shared + chain("a", 2))
        model.submit("b", 160, 50, shared + chain("b", 2))
        model.step()  # both admitted; b finds a's prefix, computed in this same step
        return model.snapshot().used_blocks

    assert used_blocks(EngineParams()) == 8 + 2 + 2
    assert used_blocks(EngineParams(enable_prefix_caching=False)) == 2 * 10


def test_a_block_computed_twice_is_kept_once() -> None:
    model = EngineModel(EngineParams())
    conversation = chain("conversation", 6)
    model.submit("a", 32, 40, conversation)  # its answer fills blocks 2 and 3 while decoding
    for _ in range(3):
        model.step()
    # b replays a's answer before a ends: it hits a's prompt and computes blocks 2-3 itself.
    model.submit("b", 70, 60, conversation)
    b_tokens = 0
    while model.has_work:
        result = model.step()
        b_tokens += sum(1 for r, _ in result.tokens_emitted if r == "b")
        if "a" in result.finished:
            # a's copies of blocks 2-3 went back: b's context alone is in use.
            assert model.snapshot().used_blocks == -(-(70 + b_tokens) // BS)
    assert model.snapshot().used_blocks == 0


def test_cached_blocks_count_as_free_and_go_least_recently_used_first() -> None:
    params = EngineParams(num_gpu_blocks=6, max_model_len=96)
    model = EngineModel(params)
    serve(model, "a", 32, 1, chain("a", 2))  # leaves 2 cached blocks, a0 a1
    serve(model, "c", 32, 1, chain("c", 2))  # then c0 c1
    assert model.snapshot().used_blocks == 0
    serve(model, "big", 64, 1)  # 4 blocks: 2 empty ones, then the 2 oldest cached, a's
    assert serve(model, "a-again", 32, 1, chain("a", 2))[0] == 0
    assert serve(model, "c-again", 48, 1, chain("c", 2))[0] == 2 * BS


def test_a_sequences_tail_blocks_are_evicted_first() -> None:
    params = EngineParams(num_gpu_blocks=6, max_model_len=96)
    model = EngineModel(params)
    serve(model, "a", 64, 1, chain("a", 4))  # caches a0..a3; 2 blocks stay empty
    serve(model, "big", 64, 1)  # 4 blocks: the 2 empty ones, then a3 and a2
    assert serve(model, "a-again", 64, 1, chain("a", 4))[0] == 2 * BS


def test_an_answer_is_cached_for_the_turn_that_replays_it() -> None:
    model = EngineModel(EngineParams())
    user = {"role": "user", "content": "x" * 640}
    first = {"model": "m", "messages": [user]}
    answer = {"role": "assistant", "content": output_text(100)}
    second = {"model": "m", "messages": [user, answer, {"role": "user", "content": "more?"}]}
    first_text, second_text = prompt_text(first, "chat"), prompt_text(second, "chat")
    assert second_text.startswith(first_text + output_text(100))
    first_tokens, second_tokens = (engine_prompt_tokens(b, "chat") for b in (first, second))
    serve(model, "turn-1", first_tokens, 100, sequence_hashes(first_text, 100, BS))
    cached, _ = serve(model, "turn-2", second_tokens, 10, sequence_hashes(second_text, 10, BS))
    # Turn 1's prompt text fills 10 blocks; its KV held 164 + 100 - 1 = 263 computed tokens,
    # whose 16 full blocks are all in turn 2's prompt (turn 1's text with the answer: 1,104
    # characters, 17 blocks).
    assert first_tokens == 164 and len(first_text) // (4 * BS) == 10
    assert cached == 16 * BS


def test_a_preempted_sequence_resumes_from_its_cached_blocks() -> None:
    def finish_s(params: EngineParams) -> float:
        model = EngineModel(params)
        model.submit("old", 32, 40, chain("old", 4))
        model.submit("new", 32, 40, chain("new", 4))
        now_s, preempted = 0.0, 0
        while model.has_work:
            result = model.step()
            now_s += result.duration_s
            preempted += len(result.preempted)
        assert preempted
        return now_s

    on = EngineParams(num_gpu_blocks=6, max_model_len=96, prefill_per_token_s=0.01)
    off = on.model_copy(update={"enable_prefix_caching": False})
    assert finish_s(on) < finish_s(off)

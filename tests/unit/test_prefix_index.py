"""The prefix index: chains over message boundaries, lookup, ageing, calibration, bounds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.core.decision_pipeline import answered, routed, with_cached
from gateway.core.prefix_chain import BLOCK_CHARS, PrefixChain, chain_of
from gateway.core.prefix_index import IndexParams, PrefixIndex
from policies.base import EngineSignals, RouteRequest, SloTarget

SYSTEM = {"role": "system", "content": "You are terse. " * 50}


def body(*turns: str, **extra: object) -> dict[str, object]:
    messages = [SYSTEM] + [
        {"role": "user" if i % 2 == 0 else "assistant", "content": text}
        for i, text in enumerate(turns)
    ]
    return {"model": "m", "messages": messages, **extra}


def request(prompt_tokens: int = 1000) -> RouteRequest:
    return RouteRequest("r", "m", "t", SloTarget("chat", ttft_s=1.0), prompt_tokens)


def test_chain_follows_message_boundaries_and_replays_match() -> None:
    first = chain_of(body("hello"))
    later = chain_of(body("hello", "hi there", "and now?"))
    assert len(first.hashes) == 2 and len(later.hashes) == 4
    assert later.hashes[:2] == first.hashes  # a replayed conversation extends the chain
    assert chain_of(body("hello!")).hashes[1] != first.hashes[1]


def test_long_message_is_cut_so_a_shared_document_matches_up_to_the_divergence() -> None:
    document = "".join(f"passage {i}. " for i in range(3000))  # about 40,000 characters
    one = chain_of(body(document + "Question one?"))
    two = chain_of(body(document + "Another question entirely?"))
    blocks = len(document) // BLOCK_CHARS
    assert len(one.hashes) >= blocks
    shared = sum(1 for a, b in zip(one.hashes, two.hashes, strict=False) if a == b)
    assert shared >= blocks  # all but the sub-block where they diverge
    assert one.hashes[-1] != two.hashes[-1]


def test_seed_covers_model_tools_and_salt() -> None:
    plain = chain_of(body("hello")).hashes[0]
    assert chain_of(body("hello", tools=[{"type": "function"}])).hashes[0] != plain
    assert chain_of(body("hello", cache_salt="tenant-a")).hashes[0] != plain
    assert chain_of({**body("hello"), "model": "other"}).hashes[0] != plain
    assert chain_of({"model": "m", "prompt": "text " * 10}).hashes  # completions


def test_lookup_finds_each_endpoints_depth_and_predicts_tokens() -> None:
    index = PrefixIndex()
    short, long = chain_of(body("hello")), chain_of(body("hello", "hi", "more"))
    index.routed("a", short, 500, now=0.0)
    index.routed("b", long, 500, now=0.0)
    assert index.match(long) == {"a": 2, "b": 4}
    annotated = with_cached(request(1000), index, long)
    assert round(annotated.cached_tokens["b"]) == 1000  # the whole prompt
    assert 0 < annotated.cached_tokens["a"] < 1000
    assert index.match(chain_of(body("something else"))) == {"a": 1, "b": 1}  # the system prompt
    sub_tenant = request(1000)._replace(fairness_key="t/team-a")
    assert with_cached(sub_tenant, index, long) == annotated._replace(fairness_key="t/team-a")
    assert (
        with_cached(request(), index, chain_of({"model": "x", "prompt": "q"})).cached_tokens == {}
    )


def test_entries_age_out_as_the_endpoint_writes_its_capacity() -> None:
    index = PrefixIndex(IndexParams(capacity_tokens=10_000, kappa=1.0))
    old = chain_of(body("old conversation"))
    index.routed("a", old, 100, now=0.0)
    for turn in range(5):
        index.routed("a", chain_of(body(f"other {turn}")), 1_500, now=1.0)
    assert index.match(old) == {"a": 2}  # 7,600 tokens written: still within capacity
    index.routed("a", chain_of(body("one more")), 3_000, now=2.0)
    assert index.match(old) == {"a": 1}  # beyond it: gone (the system prompt was re-touched)


def test_scraped_counters_age_entries_by_other_replicas_traffic() -> None:
    index = PrefixIndex(IndexParams(capacity_tokens=10_000, kappa=1.0))
    chain = chain_of(body("mine"))
    engine = EngineSignals(prefix_cache_queries_total=0.0, prefix_cache_hits_total=0.0)
    routed(index, engine, "a", chain, 100, now=0.0)
    busy = EngineSignals(prefix_cache_queries_total=50_000.0, prefix_cache_hits_total=20_000.0)
    routed(index, busy, "a", chain_of({"model": "m", "prompt": "x"}), 10, now=1.0)
    assert index.match(chain) == {}


def test_ttl_forgets_whatever_the_traffic() -> None:
    index = PrefixIndex(IndexParams(ttl_s=60.0))
    chain = chain_of(body("hosted"))
    index.routed("p", chain, 10, now=0.0)
    index.routed("p", chain_of({"model": "m", "prompt": "x"}), 10, now=61.0)
    assert index.match(chain) == {}


def test_calibration_a_miss_shrinks_the_cache_and_precision_discounts() -> None:
    index = PrefixIndex(IndexParams(capacity_tokens=10_000, kappa=1.0))
    old = chain_of(body("old"))
    index.routed("a", old, 100, now=0.0)
    index.routed("a", chain_of(body("newer")), 9_000, now=0.0)
    assert index.match(old) == {"a": 2}
    index.calibrate("a", chain_of(body("newer")), predicted=900.0, actual=0, prompt=1000, now=1.0)
    assert index.holders["a"].precision < 1.0
    assert index.holders["a"].kappa < 1.0
    assert index.match(old) == {"a": 1}  # the oldest entries went with the smaller cache
    before = with_cached(request(), index, chain_of(body("newer"))).cached_tokens["a"]
    assert before < 1000  # discounted by precision


def test_calibration_an_unpredicted_hit_adds_entries() -> None:
    index = PrefixIndex()
    chain = chain_of(body("learned elsewhere", "answer", "next"))
    index.calibrate("b", chain, predicted=0.0, actual=1000, prompt=1000, now=0.0)
    assert index.match(chain) == {"b": 4}  # another replica's traffic, learned from the truth


def test_calibration_compares_the_prediction_in_the_engines_own_token_count() -> None:
    """The prediction is in estimated tokens; the engine counts its own. A hit that is exact in
    the engine's tokens, under an estimate 30% high, is no miss (real vLLM: 25-33% high)."""
    index = PrefixIndex(IndexParams(kappa=1.0))
    chain = chain_of(body("first question", "answer", "next"))
    index.routed("a", chain, 100, now=0.0)
    estimated = with_cached(request(1300), index, chain)
    predicted = estimated.cached_tokens["a"]  # the whole chain: 1300 estimated tokens
    answered(index, "a", estimated, chain, cached=round(predicted / 1.3), prompt=1000, now=1.0)
    assert index.holders["a"].precision > 0.999 and index.holders["a"].kappa == 1.0
    index.calibrate("a", chain, predicted, round(predicted / 1.3), prompt=1000, now=2.0)
    assert index.holders["a"].precision < 0.98  # unscaled, the same hit reads as a miss


def test_bounds_per_endpoint_and_overall() -> None:
    index = PrefixIndex(IndexParams(entries_per_endpoint=10, max_entries=25))
    for turn in range(20):
        index.routed("a", chain_of(body(f"turn {turn}")), 1, now=0.0)
    assert index.entries("a") <= 10
    for endpoint in ("b", "c", "d"):
        for turn in range(20):
            index.routed(endpoint, chain_of(body(f"{endpoint} {turn}")), 1, now=0.0)
    assert len(index.masks) <= 25
    assert index.memory_bytes() > 0
    index.forget("a")
    assert index.entries("a") == 0


def test_the_plain_message_fast_path_hashes_as_the_general_envelope_and_content() -> None:
    plain = chain_of(body("hello", "hi there"))
    spelled_out = chain_of(
        {
            "model": "m",
            "messages": [
                *body()["messages"],
                {"role": "user", "content": [{"type": "text", "text": "hello"}], "name": None},
                {"role": "assistant", "content": "hi there", "tool_call_id": None},
            ],
        }
    )
    assert spelled_out == plain
    swapped = {
        "model": "m",
        "messages": [*body()["messages"], {"role": "assistant", "content": "hello"}],
    }
    assert chain_of(swapped).hashes[-1] != plain.hashes[-2]  # the role is part of the block


def test_an_empty_prompt_has_an_empty_chain_and_nothing_cached() -> None:
    index = PrefixIndex()
    index.routed("a", chain_of(body("hello")), 1_000, now=0.0)
    for empty in (
        {"model": "m", "prompt": ""},
        {"model": "m", "messages": [{"role": "user", "content": ""}]},
    ):
        chain = chain_of(empty)
        assert chain.hashes == ()
        assert with_cached(request(0), index, chain).cached_tokens == {}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 12), st.integers(0, 3)), max_size=60),
    st.integers(1, 12),
    st.integers(1, 20_000),
)
def test_prefix_lookup_by_kept_slots_equals_the_bit_loop(
    routes: list[tuple[int, int, int]], depth: int, prompt_tokens: int
) -> None:
    """`PrefixIndex.cached` and `match` read each mask's slots from a memo: the same endpoints,
    tokens and order as walking the mask's bits, on a cold memo and a warm one."""
    chains = [PrefixChain(tuple(range(b, b + 12)), tuple(range(100, 1300, 100))) for b in (0, 5)]
    index = PrefixIndex()
    for endpoint, routed_depth, which in routes:
        chain = chains[which % 2]
        index.routed(f"e{endpoint}", chain._replace(hashes=chain.hashes[:routed_depth]), 0, 0.0)
    for holder in index.holders.values():  # precisions other than 1
        index._precision[holder.slot] = holder.slot / 40
    chain = chains[0]._replace(hashes=chains[0].hashes[:depth], ends=chains[0].ends[:depth])
    for _ in range(2):
        cached, depths = index.cached(chain, prompt_tokens), index.match(chain)
        plain_cached, plain_depths = _bit_loop(index, chain, prompt_tokens)
        assert list(cached.items()) == list(plain_cached.items())
        assert list(depths.items()) == list(plain_depths.items())


def _bit_loop(
    index: PrefixIndex, chain: PrefixChain, prompt_tokens: int
) -> tuple[dict[str, float], dict[str, int]]:
    """`PrefixIndex.cached` and `match` as they were: each mask's bits walked lowest first."""
    ids, precision, cached, depths = index._ids, index._precision, {}, {}
    scale = prompt_tokens / chain.ends[-1]
    for bits, depth in index._walk(chain.hashes):
        tokens = chain.ends[depth - 1] * scale
        while bits:
            low = bits & -bits
            slot = low.bit_length() - 1
            cached[ids[slot]] = precision[slot] * tokens
            depths[ids[slot]] = depth
            bits ^= low
    return cached, depths

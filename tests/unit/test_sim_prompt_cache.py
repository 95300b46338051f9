"""The simulated hosted provider's prompt caching, OpenAI's rules: 1,024+ tokens, 128-token
steps of the longest prefix seen before, forgotten after a while or when the LRU is full."""

from __future__ import annotations

import random

import pytest

from gateway.offline.members import VirtualProvider
from gateway.offline.scenario import ProviderSpec
from gateway.sim.provider import HostedPromptCache, ProviderLatency, ProviderParams
from gateway.sim.wire import parse_completion

STEP = 128


def chain(name: str, blocks: int) -> tuple[int, ...]:
    return tuple(hash((name, i)) for i in range(blocks))


def test_prompts_under_1024_tokens_are_never_cached() -> None:
    cache = HostedPromptCache(ProviderParams())
    hashes = chain("short", 7)
    assert [cache.serve(hashes, 1000, now_s=t) for t in (0.0, 1.0)] == [0, 0]


def test_cached_tokens_are_the_seen_prefix_in_128_token_steps() -> None:
    cache = HostedPromptCache(ProviderParams())
    system = chain("system", 10)
    assert cache.serve(system + chain("a", 4), 14 * STEP + 50, now_s=0.0) == 0
    assert cache.serve(system + chain("b", 4), 14 * STEP + 50, now_s=1.0) == 10 * STEP


def test_a_repeat_never_counts_the_whole_prompt() -> None:
    cache = HostedPromptCache(ProviderParams())
    hashes = chain("exact", 12)
    cache.serve(hashes, 12 * STEP, now_s=0.0)
    assert cache.serve(hashes, 12 * STEP, now_s=1.0) == 11 * STEP


def test_a_shared_prefix_under_1024_tokens_gives_nothing() -> None:
    cache = HostedPromptCache(ProviderParams())
    cache.serve(chain("doc", 7) + chain("a", 5), 12 * STEP, now_s=0.0)
    assert cache.serve(chain("doc", 7) + chain("b", 5), 12 * STEP, now_s=1.0) == 0


def test_prefixes_expire_after_the_ttl() -> None:
    cache = HostedPromptCache(ProviderParams(prompt_cache_ttl_s=300))
    hashes = chain("doc", 12)
    cache.serve(hashes, 12 * STEP + 1, now_s=0.0)
    assert cache.serve(hashes, 12 * STEP + 1, now_s=299.0) == 12 * STEP  # and refreshed
    assert cache.serve(hashes, 12 * STEP + 1, now_s=598.0) == 12 * STEP
    assert cache.serve(hashes, 12 * STEP + 1, now_s=1000.0) == 0


def test_the_lru_keeps_only_the_most_recent_blocks() -> None:
    cache = HostedPromptCache(ProviderParams(prompt_cache_blocks=20))
    old, new = chain("old", 12), chain("new", 12)
    cache.serve(old, 12 * STEP + 1, now_s=0.0)
    cache.serve(new, 12 * STEP + 1, now_s=1.0)
    assert cache.serve(new, 12 * STEP + 1, now_s=2.0) == 12 * STEP
    assert cache.serve(old, 12 * STEP + 1, now_s=3.0) == 0  # 4 of its first blocks were evicted


def test_lookup_hashes_the_rendered_prompt_in_128_token_blocks() -> None:
    cache = HostedPromptCache(ProviderParams())
    body = {"model": "m", "messages": [{"role": "user", "content": "y" * 6000}]}
    request = parse_completion(body, "chat", default_max_tokens=1)
    blocks = len(request.prompt_text) // (4 * STEP)
    assert blocks == 11
    seen = (request.prompt_text, request.cache_salt, blocks * STEP + 1)
    assert [cache.lookup(*seen, now_s=t) for t in (0.0, 1.0)] == [0, blocks * STEP]
    off = HostedPromptCache(ProviderParams(prompt_caching=False))
    assert [off.lookup(*seen, now_s=t) for t in (0.0, 1.0)] == [0, 0]


def test_the_offline_provider_caches_as_the_live_one_and_skips_the_prefill() -> None:
    params = ProviderParams(ttft_sigma=0.0, ttft_per_prompt_token_s=1e-4)
    provider = VirtualProvider(ProviderSpec(id="p", params=params), seed=1)
    text, prompt = "z" * 8000, 2001
    cold, warm = (provider.start(prompt, 4, now_s=t, text=text) for t in (0.0, 1.0))
    assert (cold.cached, warm.cached) == (0, 15 * STEP)  # (2001 - 1) // 128 blocks
    assert (cold.first_s - 0.0) - (warm.first_s - 1.0) == pytest.approx(15 * STEP * 1e-4)
    assert provider.start(prompt, 4, now_s=2.0).cached is None  # no text: nothing known


def test_cached_tokens_skip_prefill_time() -> None:
    params = ProviderParams(ttft_sigma=0.0, ttft_per_prompt_token_s=1e-4)
    latency = ProviderLatency(params, random.Random(1))
    cold_s, _ = latency.draw(2000)
    warm_s, _ = latency.draw(2000, cached_tokens=1920)
    assert cold_s - warm_s == pytest.approx(1920 * 1e-4)

"""OpenAI wire helpers of the simulated servers: parsing, token estimates, chunk shapes."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from gateway.sim.provider import ProviderLatency, ProviderParams, go_duration
from gateway.sim.wire import (
    DONE,
    CompletionRequest,
    CompletionWriter,
    InvalidBody,
    embeddings_body,
    parse_completion,
)


def events(raw: bytes) -> list[dict[str, Any]]:
    return [json.loads(part[6:]) for part in raw.split(b"\n\n") if part and part != DONE[:-2]]


def test_chat_prompt_estimate_is_chars_over_four_plus_four_per_message() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * 400}] * 2}
    assert parse_completion(body, "chat", default_max_tokens=64).prompt_tokens == 208


def test_text_parts_and_token_id_prompts_are_counted() -> None:
    parts = {"role": "user", "content": [{"type": "text", "text": "y" * 40}]}
    chat = parse_completion({"model": "m", "messages": [parts]}, "chat", default_max_tokens=1)
    ids = parse_completion({"model": "m", "prompt": [1, 2, 3]}, "completion", default_max_tokens=1)
    assert (chat.prompt_tokens, ids.prompt_tokens) == (14, 3)


def test_max_completion_tokens_wins_and_default_applies() -> None:
    base = {"model": "m", "prompt": "hi"}
    body = base | {"max_completion_tokens": 7}
    given = parse_completion(body, "completion", default_max_tokens=9)
    default = parse_completion(base, "completion", default_max_tokens=9)
    assert (given.max_tokens, given.max_tokens_given) == (7, True)
    assert (default.max_tokens, default.max_tokens_given) == (9, False)


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"messages": [{"role": "user", "content": "x"}]},
        {"model": "m", "messages": []},
        {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0},
    ],
)
def test_invalid_chat_bodies_are_rejected(body: object) -> None:
    with pytest.raises(InvalidBody):
        parse_completion(body, "chat", default_max_tokens=1)


def test_separate_finish_chunk_has_an_empty_delta() -> None:
    request = CompletionRequest("chat", "m", True, False, 5, 2, True)
    writer = CompletionWriter(request, separate_finish=True)
    chunks = events(writer.chunk(0) + writer.chunk(1))
    choices = [c["choices"][0] for c in chunks]
    assert [c["finish_reason"] for c in choices] == [None, None, "length"]
    assert choices[-1]["delta"] == {}


def test_embeddings_are_deterministic_unit_vectors() -> None:
    first = embeddings_body({"model": "e", "input": ["a", "b"]})
    again = embeddings_body({"model": "e", "input": "a"})
    vector = first["data"][0]["embedding"]
    assert vector == again["data"][0]["embedding"]
    assert sum(v * v for v in vector) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.012, "12ms"), (1.0, "1s"), (1.5, "1.5s"), (90, "1m30s"), (360, "6m0s"), (3600, "1h0m0s")],
)
def test_go_duration_matches_openai_reset_headers(seconds: float, text: str) -> None:
    assert go_duration(seconds) == text


def test_provider_latency_draws_are_seeded_and_grow_with_the_prompt() -> None:
    params = ProviderParams(ttft_median_s=0.2, ttft_sigma=0.5, ttft_per_prompt_token_s=1e-4)
    first = ProviderLatency(params, random.Random(5))
    again = ProviderLatency(params, random.Random(5))
    assert [first.draw(10) for _ in range(5)] == [again.draw(10) for _ in range(5)]
    fixed = ProviderLatency(params.model_copy(update={"ttft_sigma": 0.0}), random.Random(1))
    assert fixed.draw(1000)[0] == pytest.approx(0.2 + 0.1)
    ttfts = sorted(first.draw(0)[0] for _ in range(2001))
    assert ttfts[1000] == pytest.approx(0.2, rel=0.15)

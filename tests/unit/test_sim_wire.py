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
    DetailsMode,
    InvalidBody,
    embeddings_body,
    output_text,
    parse_completion,
    prompt_text,
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


def test_a_later_turn_renders_as_the_first_prompt_followed_by_its_answer() -> None:
    user = {"role": "user", "content": "hi"}
    answer = {"role": "assistant", "content": output_text(3)}
    first = prompt_text({"messages": [user]}, "chat")
    later = prompt_text({"messages": [user, answer, user]}, "chat")
    assert first == "<|user|>\nhi\n<|assistant|>\n"
    assert later.startswith(first + "The quick brown")


def test_completion_prompts_render_as_their_text() -> None:
    assert prompt_text({"prompt": "abc"}, "completion") == "abc"
    assert prompt_text({"prompt": ["ab", "c"]}, "completion") == "abc"
    assert prompt_text({"prompt": [1, 70000]}, "completion") == "00011170"  # 4 chars a token


@pytest.mark.parametrize(
    ("mode", "cached", "details"),
    [
        ("off", 32, None),
        ("nonzero", 0, None),
        ("nonzero", 32, {"cached_tokens": 32}),
        ("always", 0, {"cached_tokens": 0, "audio_tokens": 0}),
    ],
)
def test_usage_reports_prompt_tokens_details_by_mode(
    mode: DetailsMode, cached: int, details: dict[str, int] | None
) -> None:
    writer = CompletionWriter(
        CompletionRequest("chat", "m", True, True, 50, 1, True), details_mode=mode
    )
    writer.details.cached_tokens = cached
    assert writer.usage().get("prompt_tokens_details") == details
    assert writer.body()["usage"] == writer.usage()


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

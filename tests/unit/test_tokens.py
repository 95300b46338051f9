"""Prompt-token estimation from request bodies, and the optional real tokenizer."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from gateway.core.tokens import (
    MEDIA_PART_TOKENS,
    SAMPLE_CHARS,
    count_texts,
    estimate_message_tokens,
    estimate_prompt_tokens,
    estimate_response_tokens,
    load_counter,
)

TWELVE = "hello world!"  # 12 characters: 3 estimated tokens (2.52 + one "!" 0.24, rounded up)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, 0),
        # one message: 3 text + 4 per message + 3 reply priming
        ({"messages": [{"role": "user", "content": TWELVE}]}, 10),
        (
            {
                "messages": [
                    {"role": "system", "content": TWELVE},
                    {"role": "user", "content": TWELVE, "name": "ann"},
                ]
            },
            3 + 3 + 4 * 2 + 1 + 3,
        ),
        # content parts: text summed with the other text before rounding, an image fixed
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "abcdef"},
                            {"type": "image_url", "image_url": {"url": "data:..."}},
                            {"type": "text", "text": "gh"},
                        ],
                    }
                ]
            },
            2 + MEDIA_PART_TOKENS + 4 + 3,
        ),
        # no content (an assistant tool call): the call's strings count
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}],
                    }
                ]
            },
            # "function" + "name" + "f" + "arguments" + "{}" = 24 characters
            6 + 4 + 3,
        ),
        # tool definitions are part of the prompt too
        (
            {
                "messages": [{"role": "user", "content": ""}],
                "tools": [{"type": "function", "function": {"name": "lookup"}}],
            },
            # "type" "function" "function" "name" "lookup": 30 characters
            count_texts(["type", "function", "function", "name", "lookup"]) + 4 + 3,
        ),
        # completions and embeddings
        ({"prompt": TWELVE}, 3),
        ({"prompt": [TWELVE, TWELVE]}, 6),
        ({"prompt": [101, 102, 103]}, 3),  # token ids count exactly
        ({"prompt": [[1, 2], [3, 4, 5]]}, 5),
        ({"input": "x" * 400}, count_texts(["x" * 400])),
        # malformed shapes are skipped, not fatal
        ({"messages": [1, None, {"content": 5}]}, 4 + 3),
        ({"prompt": {"not": "a prompt"}}, 0),
    ],
)
def test_estimates_characters_over_four_plus_overheads(body: dict[str, Any], expected: int) -> None:
    assert estimate_prompt_tokens(body) == expected


def test_a_32k_token_prompt_estimates_to_32k() -> None:
    body = {"messages": [{"role": "user", "content": "abcd" * 32_000}]}
    assert estimate_prompt_tokens(body) == count_texts(["abcd" * 32_000]) + 4 + 3


def test_a_counter_replaces_the_character_estimate() -> None:
    words = {"messages": [{"role": "user", "content": "one two three"}], "tools": []}

    def count_words(text: str) -> int:
        return len(text.split())

    assert estimate_prompt_tokens(words, count_words) == 3 + 4 + 3


@pytest.mark.parametrize("spec", [None, "chars"])
def test_the_default_is_the_estimate(spec: str | None) -> None:
    assert load_counter(spec) is None


@pytest.mark.parametrize("spec", ["sentencepiece:x", "tiktoken", "tiktoken:"])
def test_an_unknown_tokenizer_is_a_configuration_error(spec: str) -> None:
    with pytest.raises(ValueError, match="unknown tokenizer"):
        load_counter(spec)


def test_a_missing_tiktoken_degrades_to_the_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # import raises ImportError
    assert load_counter("tiktoken:o200k_base") is None


def fake_tiktoken(known: str) -> types.ModuleType:
    """Stands in for tiktoken: one token per character, one known encoding."""

    class Encoding:
        def encode_ordinary(self, text: str) -> list[int]:
            return [ord(c) for c in text]

    def get_encoding(name: str) -> Encoding:
        if name != known:
            raise ValueError(f"Unknown encoding {name}")
        return Encoding()

    module = types.ModuleType("tiktoken")
    module.__dict__["get_encoding"] = get_encoding
    return module


def test_tiktoken_counts_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", fake_tiktoken("o200k_base"))
    counter = load_counter("tiktoken:o200k_base")
    assert counter is not None
    assert estimate_prompt_tokens({"prompt": TWELVE}, counter) == 12
    assert load_counter("tiktoken:no_such_encoding") is None


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"input": TWELVE}, 3),
        ({"instructions": TWELVE, "input": TWELVE}, 6),
        # an item: 4 + its text; plus 3 reply priming for an item list
        ({"input": [{"role": "user", "content": TWELVE}]}, 3 + 4 + 3),
        (
            {
                "input": [
                    {
                        "type": "message",
                        "role": "user",
                        "content": [
                            {"type": "input_text", "text": TWELVE},
                            {"type": "input_image", "image_url": "x"},
                        ],
                    },
                    {"type": "function_call", "name": "abcd", "arguments": "efgh"},
                    {"type": "function_call_output", "call_id": "c", "output": TWELVE},
                    {"type": "reasoning", "summary": [{"type": "summary_text", "text": TWELVE}]},
                ]
            },
            # the text (12 + abcd efgh + 12 + 12 characters); 4 items, an image, priming
            count_texts([TWELVE, "abcd", "efgh", TWELVE, TWELVE]) + 4 * 4 + MEDIA_PART_TOKENS + 3,
        ),
        # every string of the tools, keys included: type function name + 12 = 28 chars
        ({"input": "", "tools": [{"type": "function", "name": TWELVE}]}, 7),
    ],
)
def test_responses_bodies_count_instructions_items_and_tools(
    body: dict[str, Any], expected: int
) -> None:
    assert estimate_response_tokens(body) == expected


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # 3 text + 4 per message + 3 reply priming
        ({"messages": [{"role": "user", "content": TWELVE}]}, 10),
        ({"system": TWELVE, "messages": [{"role": "user", "content": TWELVE}]}, 13),
        (
            {
                "system": [{"type": "text", "text": TWELVE}],
                "messages": [
                    {"role": "user", "content": [{"type": "image", "source": {}}]},
                    {
                        "role": "assistant",
                        "content": [
                            {"type": "tool_use", "id": "t", "name": "abcd", "input": {"q": TWELVE}}
                        ],
                    },
                    {
                        "role": "user",
                        "content": [
                            {
                                "type": "tool_result",
                                "tool_use_id": "t",
                                "content": [{"type": "text", "text": TWELVE}],
                            }
                        ],
                    },
                ],
            },
            # the text (12 + abcd q 12 + 12 characters); 3 messages, an image, priming
            count_texts([TWELVE, "abcd", "q", TWELVE, TWELVE]) + 3 * 4 + MEDIA_PART_TOKENS + 3,
        ),
    ],
)
def test_messages_bodies_count_system_blocks_and_tools(body: dict[str, Any], expected: int) -> None:
    assert estimate_message_tokens(body) == expected


@pytest.mark.parametrize(
    ("text", "low", "high"),
    [
        # characters per token around what o200k_base and cl100k_base count (bpe-openai): 4.65,
        # 2.20, and 1.10 / 0.79 for the Chinese (chars/4 would say 4.0 for all three)
        ("Could you help me write a short note to my landlord about the heater? " * 20, 4.2, 5.1),
        ("node-17 drained 2025-03-14: p95 1840 ms, errors 0.42%, OPS-50321. " * 20, 1.8, 2.6),
        ("请帮我写一封邮件给房东，暖气已经坏了三天了。" * 20, 0.7, 1.3),
    ],
)
def test_the_rate_follows_the_kind_of_text(text: str, low: float, high: float) -> None:
    assert low <= len(text) / count_texts([text]) <= high


def test_the_rate_is_sampled_across_the_whole_prompt() -> None:
    """Numbers after a long instruction count: a sample bounds the work, not its reach."""
    prose = "Could you help me write a short note to my landlord about the heater? " * 60
    numbers = "2025-03-14 node-17 1840 ms 0.42% OPS-50321; " * 60
    assert len(prose) > SAMPLE_CHARS
    real = 2341  # o200k_base and cl100k_base alike (bpe-openai); chars/4 says 1710
    assert count_texts([prose, numbers]) == pytest.approx(real, rel=0.1)

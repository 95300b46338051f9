"""The timing rules of one streamed request, driven with synthetic timestamps."""

from __future__ import annotations

import pytest

from gateway.bench.sweep_client import (
    CHARS_PER_TOKEN,
    Api,
    StreamTimer,
    Target,
    endpoint_url,
    make_prompt,
    parse_sse_line,
    target_body,
)


def _chat(content: str | None = None, role: str | None = None) -> dict[str, object]:
    delta = {k: v for k, v in (("role", role), ("content", content)) if v is not None}
    return {"choices": [{"index": 0, "delta": delta}]}


def _usage(completion_tokens: int, prompt_tokens: int = 131) -> dict[str, object]:
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    return {"choices": [], "usage": usage}


def test_ttft_starts_at_first_content_not_at_role_delta() -> None:
    timer = StreamTimer(t0=10.0)
    timer.feed(10.05, _chat(role="assistant", content=""))  # early role chunk: not a token
    timer.feed(10.30, _chat("Hel"))
    timer.feed(10.32, _chat("lo"))
    m = timer.finish(10.40)
    assert m.ttft_s == pytest.approx(0.30)
    assert m.e2e_s == pytest.approx(0.40)


def test_tpot_uses_usage_tokens_and_itl_lists_chunk_gaps() -> None:
    timer = StreamTimer(t0=0.0)
    for i, now in enumerate((0.1, 0.12, 0.15, 0.19)):
        timer.feed(now, _chat(f"t{i}"))
    timer.feed(0.19, _usage(completion_tokens=7))  # chunks carried several tokens
    m = timer.finish(0.2)
    assert m.output_tokens == 7 and not m.tokens_counted
    assert m.tpot_s == pytest.approx((0.19 - 0.1) / 6)
    assert m.itl_s == pytest.approx((0.02, 0.03, 0.04))
    assert m.prompt_tokens_reported == 131
    assert m.output_tokens_per_s == pytest.approx(7 / 0.2)


def test_without_usage_counts_content_deltas_and_says_so() -> None:
    timer = StreamTimer(t0=0.0)
    for i, now in enumerate((0.1, 0.2, 0.3)):
        timer.feed(now, _chat(f"t{i}"))
    m = timer.finish(0.3)
    assert (m.output_tokens, m.tokens_counted) == (3, True)
    assert m.tpot_s == pytest.approx(0.1)


def test_completions_text_counts_as_content() -> None:
    timer = StreamTimer(t0=0.0)
    timer.feed(0.5, {"choices": [{"index": 0, "text": "x"}]})
    m = timer.finish(0.6)
    assert m.ttft_s == pytest.approx(0.5)
    assert m.tpot_s is None  # one token: no per-token time


def test_error_event_fails_the_request() -> None:
    timer = StreamTimer(t0=0.0)
    timer.feed(0.1, _chat("a"))
    timer.feed(0.2, {"error": {"message": "engine died", "type": "server_error"}})
    m = timer.finish(0.2)
    assert not m.ok and m.error == "stream error: engine died"
    assert m.ttft_s is None


def test_stream_without_content_is_an_empty_response() -> None:
    timer = StreamTimer(t0=0.0)
    timer.feed(0.1, _chat(role="assistant", content=""))
    assert timer.finish(0.2).error == "empty response"


def test_parse_sse_line() -> None:
    assert parse_sse_line('data: {"a": 1}') == {"a": 1}
    assert parse_sse_line("data:[DONE]") is not None
    assert not isinstance(parse_sse_line("data: [DONE]"), dict)
    assert parse_sse_line(": ping") is None
    assert parse_sse_line("") is None


@pytest.mark.parametrize(
    ("base", "api", "url"),
    [
        ("http://h:8000/v1", "chat", "http://h:8000/v1/chat/completions"),
        ("http://h:8000/v1/", "completions", "http://h:8000/v1/completions"),
        ("http://h:8000", "chat", "http://h:8000/v1/chat/completions"),
        (
            "https://api.example.com/openai/v1",
            "chat",
            "https://api.example.com/openai/v1/chat/completions",
        ),
    ],
)
def test_endpoint_url(base: str, api: Api, url: str) -> None:
    assert endpoint_url(base, api) == url


@pytest.mark.parametrize("tokens", [16, 128, 2000])
def test_prompt_is_about_four_characters_per_token(tokens: int) -> None:
    prompt = make_prompt(tokens, nonce=7)
    assert abs(len(prompt) / CHARS_PER_TOKEN - tokens) <= 1
    assert len(prompt.split()) == tokens


def test_prompts_differ_from_the_first_token() -> None:
    a, b = make_prompt(500, nonce=1), make_prompt(500, nonce=2)
    assert a.split()[0] != b.split()[0] and a.split()[1:] == b.split()[1:]


def test_request_body_asks_for_usage_and_streams() -> None:
    chat = target_body(Target("u", "m"), "hi", 32)
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}
    assert chat["messages"] == [{"role": "user", "content": "hi"}] and chat["max_tokens"] == 32
    assert "ignore_eos" not in chat
    completion = target_body(Target("u", "m", "completions", ignore_eos=True), "hi", 8)
    assert completion["prompt"] == "hi" and completion["ignore_eos"] is True

"""The Responses and Messages stream grammars: first token, usage, completion, hold-back,
restamping and mid-stream errors, fed the way a network delivers them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.upstream.grammar import StreamGrammar
from gateway.upstream.messages_events import MessagesWatch
from gateway.upstream.responses_events import ResponsesWatch
from gateway.upstream.sse import StreamWatch, _finishes


def event(name: str, payload: dict[str, Any]) -> bytes:
    data = json.dumps(payload, separators=(",", ":"))
    return f"event: {name}\ndata: {data}\n\n".encode()


def responses_stream(text: list[str], terminal: str = "response.completed") -> list[bytes]:
    response = {"id": "resp_1", "object": "response", "model": "upstream-m", "status": "x"}
    frames = [
        event(
            "response.created",
            {"type": "response.created", "sequence_number": 0, "response": response},
        ),
        event(
            "response.in_progress",
            {"type": "response.in_progress", "sequence_number": 1, "response": response},
        ),
    ]
    for i, piece in enumerate(text):
        delta = {"type": "response.output_text.delta", "sequence_number": 2 + i, "delta": piece}
        frames.append(event("response.output_text.delta", delta))
    usage = {"input_tokens": 11, "output_tokens": len(text), "total_tokens": 11 + len(text)}
    done = {
        "type": terminal,
        "sequence_number": 2 + len(text),
        "response": response | {"usage": usage},
    }
    frames.append(event(terminal, done))
    return frames


def messages_stream(text: list[str], *, ping: bool = True) -> list[bytes]:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "upstream-m",
        "content": [],
        "usage": {"input_tokens": 9, "cache_read_input_tokens": 3, "output_tokens": 1},
    }
    frames = [event("message_start", {"type": "message_start", "message": message})]
    if ping:
        frames.append(event("ping", {"type": "ping"}))
    frames.append(
        event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        )
    )
    for piece in text:
        delta = {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": piece},
        }
        frames.append(event("content_block_delta", delta))
    frames.append(event("content_block_stop", {"type": "content_block_stop", "index": 0}))
    frames.append(
        event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": len(text)},
            },
        )
    )
    frames.append(event("message_stop", {"type": "message_stop"}))
    return frames


def feed_split(watch: StreamGrammar, stream: bytes, size: int) -> bytes:
    sent = b"".join(watch.feed(stream[i : i + size]) for i in range(0, len(stream), size))
    return sent + watch.flush()


@pytest.mark.parametrize("size", [1, 7, 64, 100_000])
def test_responses_frames_split_anywhere_give_the_same_facts(size: int) -> None:
    stream = b"".join(responses_stream(["Hel", "lo", "!"]))
    watch = ResponsesWatch(started_s=0.0)
    sent = feed_split(watch, stream, size)
    assert sent == stream  # whole events, relayed as received
    assert watch.first_token_s is not None and watch.done and not watch.upstream_error
    assert watch.prompt_tokens == 11 and watch.output_tokens == 3
    assert watch.response_id == "resp_1"


def test_responses_hold_back_the_opening_events_until_the_first_text() -> None:
    frames = responses_stream(["a"])
    watch = ResponsesWatch(started_s=0.0)
    watch.feed(frames[0] + frames[1])
    assert not watch.committed
    watch.feed(
        event(
            "response.output_text.delta",
            {"type": "response.output_text.delta", "sequence_number": 2, "delta": ""},
        )
    )
    assert not watch.committed  # an empty delta is no token
    watch.feed(frames[2])
    assert watch.committed and watch.first_token_s is not None


@pytest.mark.parametrize("terminal", ["response.incomplete", "response.failed"])
def test_responses_usage_comes_from_any_terminal_event(terminal: str) -> None:
    watch = ResponsesWatch(started_s=0.0)
    for frame in responses_stream(["a", "b"], terminal=terminal):
        watch.feed(frame)
    assert watch.done and watch.output_tokens == 2 and watch.prompt_tokens == 11
    assert watch.upstream_error is (terminal == "response.failed")


def test_responses_tolerate_a_stray_done_and_tool_call_tokens() -> None:
    frames = responses_stream([])
    args = {
        "type": "response.function_call_arguments.delta",
        "sequence_number": 2,
        "delta": '{"city"',
    }
    watch = ResponsesWatch(started_s=0.0)
    watch.feed(frames[0] + frames[1] + event("response.function_call_arguments.delta", args))
    assert watch.committed and watch.first_token_s is None and watch.ttft_s is not None
    assert watch.feed(frames[2] + b"data: [DONE]\n\n").endswith(b"data: [DONE]\n\n")
    assert watch.done


def test_responses_error_before_the_first_token_fails_the_attempt() -> None:
    watch = ResponsesWatch(started_s=0.0)
    error = {"type": "error", "sequence_number": 2, "code": "server_error", "message": "x"}
    watch.feed(b"".join(responses_stream([])[:2]) + event("error", error))
    assert watch.committed and watch.failure_status == 500


def test_responses_restamp_the_model_and_write_errors_in_their_grammar() -> None:
    frames = responses_stream(["a", "b"])
    watch = ResponsesWatch(started_s=0.0, public_model="public-m")
    sent = watch.feed(b"".join(frames[:3]))
    assert b'"model":"public-m"' in sent and b"upstream-m" not in sent
    tail = watch.error_event("The upstream failed mid-stream.", "upstream_stream_interrupted")
    first, second = tail.split(b"\n\n")[:2]
    error = json.loads(first.split(b"data: ")[1])
    failed = json.loads(second.split(b"data: ")[1])
    assert error["type"] == "error" and error["sequence_number"] == 3
    assert error["code"] == "server_error" and error["error"]["message"]
    assert failed["type"] == "response.failed" and failed["sequence_number"] == 4
    assert failed["response"]["status"] == "failed" and failed["response"]["id"] == "resp_1"
    assert failed["response"]["model"] == "public-m"


@pytest.mark.parametrize("size", [1, 5, 33, 100_000])
def test_messages_frames_split_anywhere_with_ping_give_the_same_facts(size: int) -> None:
    stream = b"".join(messages_stream(["Hi", " there", "!"]))
    watch = MessagesWatch(started_s=0.0)
    assert feed_split(watch, stream, size) == stream
    assert watch.done and watch.first_token_s is not None
    assert watch.prompt_tokens == 12  # input_tokens + cache_read_input_tokens
    assert watch.output_tokens == 3  # the last message_delta's cumulative count


def test_messages_hold_back_message_start_and_ping() -> None:
    frames = messages_stream(["x"])
    watch = MessagesWatch(started_s=0.0, public_model="public-m")
    sent = watch.feed(b"".join(frames[:3]))
    assert not watch.committed
    assert b'"model":"public-m"' in sent
    watch.feed(frames[3])
    assert watch.committed


def test_messages_overloaded_before_the_first_token_is_a_529_and_later_is_relayed() -> None:
    overloaded = event(
        "error", {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    )
    early = MessagesWatch(started_s=0.0)
    early.feed(messages_stream([])[0] + overloaded)
    assert early.committed and early.failure_status == 529
    late = MessagesWatch(started_s=0.0)
    late.feed(b"".join(messages_stream(["a"])[:4]) + overloaded)
    assert late.upstream_error and late.failure_status == 0 and not late.done


def test_messages_error_event_is_anthropics_and_a_crlf_stream_is_read() -> None:
    watch = MessagesWatch(started_s=0.0)
    stream = b"".join(messages_stream(["a", "b"])).replace(b"\n", b"\r\n")
    sent = feed_split(watch, stream, 9)
    assert watch.done and watch.output_tokens == 2 and sent.count(b"\n\n") == 8
    tail = watch.error_event("The upstream failed mid-stream.", "upstream_stream_interrupted")
    assert tail.startswith(b"event: error\ndata: ")
    body = json.loads(tail.split(b"data: ")[1])
    assert body == {
        "type": "error",
        "error": {"type": "api_error", "message": "The upstream failed mid-stream."},
    }


def test_a_partial_event_waits_and_a_truncated_one_is_dropped_at_the_end() -> None:
    watch = StreamWatch(started_s=0.0)
    whole = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'
    assert watch.feed(whole + b'data: {"choices":[{"del') == whole
    assert watch.flush() == b""  # half an event is never sent
    done = StreamWatch(started_s=0.0)
    assert done.feed(whole + b"data: [DONE]") == whole
    assert done.flush() == b"data: [DONE]\n\n" and done.done


def test_chat_restamps_every_chunk_with_the_model_its_first_event_spelt() -> None:
    watch = StreamWatch(started_s=0.0, public_model="public-m")
    chunk = b'data: {"model":"gpt-x-2024","choices":[{"delta":{"content":"a"}}]}\n\n'
    assert watch.feed(chunk) == chunk.replace(b'"gpt-x-2024"', b'"public-m"')
    assert watch.feed(chunk * 2) == (chunk * 2).replace(b'"gpt-x-2024"', b'"public-m"')


def test_each_grammar_says_what_answered_and_its_cached_prompt() -> None:
    """id, the upstream's model and the finish reasons (gen_ai.response.*), cached tokens."""
    responses = ResponsesWatch(0.0, "public-m")
    feed_split(responses, b"".join(responses_stream(["a", "b"])), 64)
    assert responses.described == ("resp_1", "upstream-m", ("x",))
    messages = MessagesWatch(0.0, "public-m")
    feed_split(messages, b"".join(messages_stream(["a", "b"])), 64)
    assert messages.described == ("msg_1", "upstream-m", ("end_turn",))
    assert (messages.prompt_tokens, messages.cached_tokens) == (12, 3)
    usage = {
        "prompt_tokens": 20,
        "completion_tokens": 2,
        "prompt_tokens_details": {"cached_tokens": 16},
    }
    chunks = [
        {
            "id": "c1",
            "model": "upstream-m",
            "choices": [{"delta": {"content": "a"}, "finish_reason": None}],
        },
        {
            "id": "c1",
            "model": "upstream-m",
            "choices": [{"delta": {"content": "b"}, "finish_reason": None}],
        },
        {"id": "c1", "model": "upstream-m", "choices": [{"delta": {}, "finish_reason": "stop"}]},
        {"id": "c1", "model": "upstream-m", "choices": [], "usage": usage},
    ]
    stream = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"
    chat = StreamWatch(0.0, "public-m")
    feed_split(chat, stream, 100_000)
    assert chat.described == ("c1", "upstream-m", ("stop",))
    assert (chat.prompt_tokens, chat.cached_tokens, chat.output_tokens) == (20, 16, 2)


@pytest.mark.parametrize(
    ("event", "finishes"),
    [
        (b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}', True),
        (b'data: {"choices": [{"delta": {}, "finish_reason": "length"}]}', True),
        (b'data: {"choices":[{"delta":{"content":"a"},"finish_reason":null}]}', False),
        (b'data: {"choices": [{"delta": {"content": "a"}, "finish_reason": null}]}', False),
        (b'data: {"choices":[{"delta":{"content":"a"}}]}', False),
        # n > 1: the second choice finishes while the first streams on
        (
            b'data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null},'
            b'{"index":1,"delta":{},"finish_reason":"stop"}]}',
            True,
        ),
    ],
)
def test_a_finishing_chunk_is_told_in_compact_and_spaced_json(event: bytes, finishes: bool) -> None:
    assert _finishes(event) is finishes

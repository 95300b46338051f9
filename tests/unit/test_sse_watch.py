from __future__ import annotations

import json

from gateway.upstream.sse import StreamWatch, error_event, routine_events, whole_events


def event(payload: object) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def chunk(content: str | None, role: str | None = None) -> bytes:
    delta: dict[str, str] = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    return event({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]})


def test_first_token_ignores_role_only_and_empty_chunks() -> None:
    watch = StreamWatch(started_s=0.0)
    watch.feed(chunk("", role="assistant"))
    assert watch.first_token_s is None
    watch.feed(chunk("Hello"))
    assert watch.first_token_s is not None
    assert watch.content_events == 1


def test_counts_content_events_split_across_reads_and_reads_usage() -> None:
    stream = b"".join(chunk(t) for t in ["a", "b", "c"])
    stream += event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    stream += event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})
    stream += b"data: [DONE]\n\n"
    watch = StreamWatch(started_s=0.0)
    for i in range(0, len(stream), 7):  # arbitrary network fragmentation
        watch.feed(stream[i : i + 7])
    assert watch.content_events == 3
    assert watch.usage == {"prompt_tokens": 7, "completion_tokens": 3}
    assert watch.output_tokens == 3
    assert watch.done


def test_stream_without_done_is_not_done() -> None:
    watch = StreamWatch(started_s=0.0)
    watch.feed(chunk("a") + chunk("b"))
    assert not watch.done
    assert watch.output_tokens == 2


def test_completions_text_counts_and_error_event_is_noticed() -> None:
    watch = StreamWatch(started_s=0.0)
    watch.feed(event({"object": "text_completion", "choices": [{"index": 0, "text": "x"}]}))
    watch.feed(event({"error": {"message": "boom"}}))
    assert watch.content_events == 1
    assert watch.upstream_error


def test_one_event_per_read_counts_content_and_still_sees_usage_errors_and_done() -> None:
    reads = [chunk("", role="assistant"), chunk("a"), chunk(""), chunk("b"), chunk("c")]
    reads += [event({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 9}})]
    reads += [event({"error": {"message": "late"}}), b"data: [DONE]\n\n"]
    watch = StreamWatch(started_s=0.0)
    for read in reads:
        watch.feed(read)
    assert watch.content_events == 3
    assert watch.output_tokens == 9
    assert watch.upstream_error and watch.done


def compact(content: str) -> bytes:
    body = {"choices": [{"index": 0, "delta": {"content": content}}]}
    return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"


def test_reads_of_severalroutine_events_count_each_content_event_once() -> None:
    watch = StreamWatch(started_s=0.0)
    watch.feed(compact("") + compact("a"))
    routine = b"".join(compact(t) for t in ["b", "c", "d"])
    assert routine_events(routine) == 3
    watch.feed(routine)
    watch.feed(compact("e") + compact(""))  # one empty event: not routine, counted one by one
    assert routine_events(compact("e") + compact("")) == 0
    tool = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0}]}}]}
    watch.feed(compact("f") + event(tool))
    watch.feed(compact("g") + chunk("h"))  # spaced JSON: not routine, still counted
    assert watch.content_events == 9


def test_whole_events_holds_back_the_partial_event_after_the_last_blank_line() -> None:
    whole = chunk("a") + chunk("b")
    assert whole_events(whole + b'data: {"cho') == (whole, b'data: {"cho')
    assert whole_events(b'data: {"cho') == (b"", b'data: {"cho')
    assert whole_events(whole) == (whole, b"")
    crlf = b"data: x\r\n\r\ndata: y\r\n"
    assert whole_events(crlf) == (b"data: x\r\n\r\n", b"data: y\r\n")


def test_error_event_is_one_whole_event() -> None:
    event_bytes = error_event("boom", "upstream_stream_truncated")
    assert whole_events(event_bytes) == (event_bytes, b"")
    assert json.loads(event_bytes.removeprefix(b"data: "))["error"]["code"] == (
        "upstream_stream_truncated"
    )


def test_feed_says_which_chunks_need_no_closer_look() -> None:
    watch = StreamWatch(started_s=0.0)
    assert not watch.feed(compact("a"))  # the first token is parsed
    assert watch.feed(compact("b") + compact("c"))  # routine: whole, no error, usage or [DONE]
    assert not watch.feed(event({"error": {"message": "key sk-... exhausted"}}))
    assert not watch.feed(compact("d")[:20])  # a partial event
    assert not watch.feed(compact("d")[20:])  # its end: the watch had it pending
    assert not watch.feed(b"data: [DONE]\n\n")

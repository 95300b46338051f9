from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from gateway.upstream.sse import _ENDING, StreamWatch, routine_events, routine_head


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


def compact_stream(tokens: list[str]) -> list[bytes]:
    """A vLLM-shaped stream, one event per item: role, content, finish, usage, [DONE]."""

    def event_of(choices: list[object], **extra: object) -> bytes:
        body = {"id": "c1", "model": "up", "choices": choices, **extra}
        return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"

    events = [event_of([{"index": 0, "delta": {"role": "assistant", "content": ""}}])]
    events += [event_of([{"index": 0, "delta": {"content": t}}]) for t in tokens]
    events.append(event_of([{"index": 0, "delta": {}, "finish_reason": "stop"}]))
    events.append(event_of([], usage={"prompt_tokens": 5, "completion_tokens": len(tokens)}))
    return [*events, b"data: [DONE]\n\n"]


class CountingWatch(StreamWatch):
    read_one_by_one: int = 0

    def _event(self, event: bytes, now: float) -> None:
        self.read_one_by_one += 1
        super()._event(event, now)


def facts(watch: StreamWatch) -> tuple[object, ...]:
    return (
        watch.content_events, watch.output_tokens, watch.prompt_tokens, watch.done,
        watch.upstream_error, watch.described, watch.usage, watch.first_token_s is not None,
    )  # fmt: skip


@given(st.lists(st.text("ab ", min_size=1, max_size=3), min_size=1, max_size=30), st.data())
def test_coalesced_reads_give_what_one_event_per_read_gives(
    tokens: list[str], data: st.DataObject
) -> None:
    """However reads coalesce whole events (as under load), the watch ends with the same facts
    and relays the same bytes, restamped, as when each event comes alone."""
    events = compact_stream(tokens)
    alone = StreamWatch(0.0, "public")
    expected = b"".join(alone.feed(e) for e in events)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(events) - 1))))
    reads = [b"".join(events[a:b]) for a, b in zip([0, *cuts], [*cuts, len(events)], strict=True)]
    coalesced = StreamWatch(0.0, "public")
    assert b"".join(coalesced.feed(r) for r in reads) == expected
    assert facts(coalesced) == facts(alone)
    assert b'"model":"public"' in expected and b'"model":"up"' not in expected


def test_a_last_read_of_content_and_the_end_reads_only_the_end_one_by_one() -> None:
    events = compact_stream(["a", "b", "c", "d", "e", "f"])
    watch = CountingWatch(0.0)
    watch.feed(b"".join(events[:2]))  # role, then the first token: read one by one
    watch.feed(b"".join(events[2:]))  # five content events, then finish, usage and [DONE]
    assert watch.read_one_by_one == 2 + 3
    assert watch.content_events == 6 and watch.done
    assert watch.described.finish_reasons == ("stop",)


def test_a_whole_stream_in_one_read_reads_only_its_start_and_end_one_by_one() -> None:
    watch = CountingWatch(0.0)
    watch.feed(b"".join(compact_stream(["a", "b", "c", "d", "e", "f"])))
    assert watch.read_one_by_one == 2 + 3  # role and first token; finish, usage, [DONE]
    assert watch.content_events == 6 and watch.done and watch.prompt_tokens == 5


@given(st.lists(st.text("ab ", min_size=1, max_size=3), min_size=1, max_size=30), st.data())
def test_reads_cut_anywhere_give_what_one_event_per_read_gives(
    tokens: list[str], data: st.DataObject
) -> None:
    """The same with reads cut mid-event, as the network may: a read's marks (usage, error,
    finish) are looked for with the part of an event held over from the read before."""
    events = compact_stream(tokens)
    alone = StreamWatch(0.0, "public")
    expected = b"".join(alone.feed(e) for e in events)
    stream = b"".join(events)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(stream) - 1), max_size=12)))
    reads = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    cut = StreamWatch(0.0, "public")
    assert b"".join(cut.feed(r) for r in reads) + cut.flush() == expected
    assert facts(cut) == facts(alone)


def test_what_ends_routine_reads_is_one_list_for_the_count_and_for_the_head() -> None:
    """`routine_events` spells `_ENDING` out; each marker, appended to a routine read, ends
    it for both (the head still counts the routine events before it)."""
    routine = b"".join(compact(t) for t in ["a", "b"])
    assert routine_events(routine) == routine_head(routine) == 2
    for marker in _ENDING:
        read = routine + b'data: {"content":"c",' + marker + b"}\n\n"  # routine but for it
        assert routine_events(read) == 0, marker
        assert routine_head(read) == 2, marker

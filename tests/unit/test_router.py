"""`Router.handle`, one request start to end, over an in-process upstream (no servers)."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from gateway.config.settings import EndpointConfig, Settings, parse_config
from gateway.core.progress import StreamProgress
from gateway.errors import AttemptFailed, UpstreamError
from gateway.server.exchange import Exchange
from gateway.server.router import Router
from gateway.server.runtime import Runtime
from gateway.telemetry.record import RequestRecord
from gateway.upstream.client import UpstreamCall
from gateway.upstream.messages_events import MESSAGES
from gateway.upstream.relay import relay
from policies.base import RouteRequest
from tests.fixtures.gateway import PUBLIC_MODEL, TENANT_KEY, chat_body, config, endpoint
from tests.fixtures.upstream_fakes import Answer, Client, Cut, FakeUpstream, sse

CHUNK = {"choices": [{"delta": {"content": "hi"}}]}
USAGE = {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}}


@pytest.fixture
async def runtime() -> AsyncIterator[Runtime]:
    data = config([endpoint("a", "http://127.0.0.1:9"), endpoint("b", "http://127.0.0.1:9")])
    built = Runtime.build(parse_config(data, "test"), Settings())
    yield built
    await built.close()


def router_over(
    runtime: Runtime, handler: Callable[[EndpointConfig, UpstreamCall], Answer]
) -> tuple[Router, FakeUpstream]:
    """The runtime's own router, its forwarder opening attempts on an in-process upstream."""
    fake = FakeUpstream(handler)
    runtime.forwarder.upstream = fake
    return runtime.router, fake


def request(runtime: Runtime, *, stream: bool) -> tuple[RouteRequest, UpstreamCall, RequestRecord]:
    slo = runtime.keyring.slo(runtime.keyring.caller("Bearer sk-test-tenant-acme"), None)
    route = RouteRequest("r1", PUBLIC_MODEL, "acme", slo, prompt_tokens=5, stream=stream)
    call = UpstreamCall("r1", "/chat/completions", chat_body(stream=stream), PUBLIC_MODEL, stream)
    return route, call, RequestRecord("r1", "POST", "/v1/chat/completions", time.perf_counter())


def in_flight(runtime: Runtime) -> int:
    return sum(runtime.view.local.values())


async def test_fails_over_before_the_first_byte_and_records_the_answer(runtime: Runtime) -> None:
    def handler(ep: EndpointConfig, call: UpstreamCall) -> Answer:
        if len(fake.calls) == 1:
            raise AttemptFailed(ep.id, "http_503", status=503)
        return Answer([b'{"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}'])

    router, fake = router_over(runtime, handler)
    route, call, record = request(runtime, stream=False)
    client = Client()
    await router.handle(Exchange(route, call, record, client.receive, client.send))
    assert [endpoint_id for endpoint_id, _ in fake.calls] == [fake.calls[0][0], fake.calls[1][0]]
    assert fake.calls[0][0] != fake.calls[1][0]
    assert client.status == 200 and client.header("x-slo-gateway-attempts") == "2"
    assert record.attempts == 2 and record.endpoint_id == fake.calls[1][0]
    assert record.result is not None and record.result.output_tokens == 3
    assert record.slo_met is True and record.ranking is not None
    assert fake.released == [fake.calls[1][0]] and in_flight(runtime) == 0


async def test_a_stream_is_relayed_whole_and_judged(runtime: Runtime) -> None:
    body = [sse(CHUNK), sse(CHUNK), sse(USAGE, "[DONE]")]
    router, fake = router_over(runtime, lambda ep, call: Answer(body, headers={}))
    route, call, record = request(runtime, stream=True)
    client = Client()
    await router.handle(Exchange(route, call, record, client.receive, client.send))
    assert client.body == b"".join(body)
    assert client.header("cache-control") == "no-cache"
    assert record.result is not None and record.result.outcome == "ok"
    assert record.result.ttft_s is not None and record.result.output_tokens == 2
    assert in_flight(runtime) == 0 and len(fake.released) == 1


async def test_a_cut_stream_ends_with_an_error_event(runtime: Runtime) -> None:
    router, _ = router_over(runtime, lambda ep, call: Answer([sse(CHUNK), OSError("reset")]))
    route, call, record = request(runtime, stream=True)
    client = Client()
    await router.handle(Exchange(route, call, record, client.receive, client.send))
    assert client.body.endswith(b"\n\n") and b"upstream_stream_interrupted" in client.body
    assert record.result is not None and record.result.outcome == "upstream_error"
    assert record.slo_met is False


async def test_gives_up_with_the_last_failure_and_frees_the_tenant(runtime: Runtime) -> None:
    def refuse(ep: EndpointConfig, call: UpstreamCall) -> Answer:
        raise AttemptFailed(ep.id, "ConnectionRefused")

    router, fake = router_over(runtime, refuse)
    route, call, record = request(runtime, stream=False)
    client = Client()
    with pytest.raises(UpstreamError):
        await router.handle(Exchange(route, call, record, client.receive, client.send))
    assert client.sent == [] and len(fake.calls) == runtime.config.server.max_attempts
    assert in_flight(runtime) == 0


async def test_a_client_that_leaves_before_the_first_byte_cancels_the_attempt(
    runtime: Runtime,
) -> None:
    router, fake = router_over(runtime, lambda ep, call: Answer([b"{}"], delay_s=30))
    route, call, record = request(runtime, stream=False)
    client = Client()
    asyncio.get_running_loop().call_later(0.3, client.leave.set)
    exchange = Exchange(route, call, record, client.receive, client.send)
    await asyncio.wait_for(router.handle(exchange), 5)
    assert client.status == 499 and len(fake.calls) == 1 and fake.released == []
    assert in_flight(runtime) == 0


async def test_an_attempt_that_raises_drops_its_lease(runtime: Runtime) -> None:
    def broken(ep: EndpointConfig, call: UpstreamCall) -> Answer:
        raise Cut("a bug in the attempt, not an upstream failure")

    router, _ = router_over(runtime, broken)
    route, call, record = request(runtime, stream=False)
    client = Client()
    with pytest.raises(Cut):
        await router.handle(Exchange(route, call, record, client.receive, client.send))
    assert in_flight(runtime) == 0


def messages_call(runtime: Runtime) -> tuple[RouteRequest, UpstreamCall, RequestRecord]:
    slo = runtime.keyring.slo(runtime.keyring.caller("Bearer sk-test-tenant-acme"), None)
    route = RouteRequest("r2", PUBLIC_MODEL, "acme", slo, prompt_tokens=5, stream=True)
    body = {"model": PUBLIC_MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]}
    call = UpstreamCall("r2", "/messages", body, PUBLIC_MODEL, True, MESSAGES, "messages")
    return route, call, RequestRecord("r2", "POST", "/v1/messages", time.perf_counter())


def named(name: str, payload: dict[str, object]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()


START = named("message_start", {"type": "message_start", "message": {"model": "up", "usage": {}}})
PING = named("ping", {"type": "ping"})
TEXT = named(
    "content_block_delta",
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
)
STOP = named("message_stop", {"type": "message_stop"})
OVERLOADED = named(
    "error", {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
)


async def test_an_error_event_before_the_first_token_fails_over_and_nothing_leaks(
    runtime: Runtime,
) -> None:
    def handler(ep: EndpointConfig, call: UpstreamCall) -> Answer:
        if len(fake.calls) == 1:
            return Answer([START, PING + OVERLOADED], headers={})
        return Answer([START, PING, TEXT, STOP], headers={})

    router, fake = router_over(runtime, handler)
    route, call, record = messages_call(runtime)
    client = Client()
    await router.handle(Exchange(route, call, record, client.receive, client.send))
    assert client.status == 200 and client.header("x-slo-gateway-attempts") == "2"
    assert b"overloaded" not in client.body  # the failed attempt's held-back events never left
    assert client.body.count(b"message_start") == 2  # event line and type, once
    assert b'"model": "llama-3-8b"' in client.body or b'"model":"llama-3-8b"' in client.body
    assert record.result is not None and record.result.outcome == "ok"


async def test_a_stream_that_dies_before_its_first_token_fails_over(runtime: Runtime) -> None:
    def handler(ep: EndpointConfig, call: UpstreamCall) -> Answer:
        if len(fake.calls) == 1:
            return Answer([START, OSError("reset")], headers={})
        return Answer([START + TEXT + STOP], headers={})

    router, fake = router_over(runtime, handler)
    route, call, record = messages_call(runtime)
    client = Client()
    await router.handle(Exchange(route, call, record, client.receive, client.send))
    assert client.header("x-slo-gateway-attempts") == "2" and client.body.endswith(STOP)
    assert fake.released == [fake.calls[0][0], fake.calls[1][0]] and in_flight(runtime) == 0


async def test_after_the_first_token_a_cut_ends_with_the_grammars_error(runtime: Runtime) -> None:
    router, _ = router_over(
        runtime, lambda ep, call: Answer([START, TEXT, b"event: con", OSError("reset")])
    )
    route, call, record = messages_call(runtime)
    client = Client()
    await router.handle(Exchange(route, call, record, client.receive, client.send))
    assert client.body.endswith(
        b'"type":"api_error","message":"The upstream failed mid-stream."}}\n\n'
    )
    assert client.body.count(b"event: con") == 1  # the partial event never reached the client
    assert record.result is not None and record.result.outcome == "upstream_error"


async def test_a_cut_drops_the_partial_event_before_the_error_event(runtime: Runtime) -> None:
    partial = b'data: {"choices": [{"delta": {"content": "ab'
    router, _ = router_over(
        runtime, lambda ep, call: Answer([sse(CHUNK), partial, OSError("reset")])
    )
    route, call, record = request(runtime, stream=True)
    client = Client()
    await router.handle(Exchange(route, call, record, client.receive, client.send))
    assert client.body.startswith(sse(CHUNK)) and partial not in client.body
    assert client.body.count(b"\n\n") == 2 and b"upstream_stream_interrupted" in client.body


async def test_a_tenant_key_split_across_reads_of_an_error_event_is_redacted(
    runtime: Runtime,
) -> None:
    error = sse({"error": {"message": f"key {TENANT_KEY} exhausted"}})
    middle = error.index(b"acme")
    reads = [sse(CHUNK), error[:middle], error[middle:]]
    router, _ = router_over(runtime, lambda ep, call: Answer(reads))
    route, call, record = request(runtime, stream=True)
    client = Client()
    await router.handle(Exchange(route, call, record, client.receive, client.send))
    assert TENANT_KEY.encode() not in client.body and b"key [redacted] exhausted" in client.body
    assert record.result is not None and record.result.outcome == "ok"  # the upstream's error


class _ScriptedWatch:
    """A stream watch whose every chunk says when its last token came and how many so far
    (b"<last_s> <tokens>"), so that the relay's reads carry chosen times."""

    def __init__(self) -> None:
        self.last_token_s: float | None = None
        self.output_tokens = 0
        self.ttft_s: float | None = None
        self.done = self.upstream_error = False

    def feed(self, chunk: bytes) -> bytes:
        last_s, tokens = chunk.split()
        self.last_token_s, self.output_tokens, self.ttft_s = float(last_s), int(tokens), 0.2
        return chunk

    def flush(self) -> bytes:
        self.done = True
        return b""

    def error_event(self, message: str, code: str) -> bytes:
        return b""


async def test_the_relay_tells_the_stream_callback_only_when_due_and_the_marks_stay_plain(
    runtime: Runtime,
) -> None:
    """The relay tells `seen` of a stream only when its last token reaches the time `seen`
    asked for, and once at the end; the stretches and the rest must be those of calling
    `StreamProgress` on every read."""
    rng, now, tokens, reads = random.Random(7), 100.0, 0, []
    for read in range(400):
        now += rng.choice((0.001, 0.01, 0.05, 0.3))
        tokens += rng.randint(0, 3) if read else 1
        reads.append((now, tokens))
    fake = FakeUpstream(lambda ep, call: Answer([f"{t} {n}".encode() for t, n in reads]))
    route, call, _ = request(runtime, stream=True)
    opened, watch = await fake.open(runtime.registry.endpoints["a"], call), _ScriptedWatch()
    watch.feed(opened.first)  # as `commit` does with the first bytes
    fast, plain, told, marks = StreamProgress(), StreamProgress(), [], []
    seen = runtime.forwarder.finisher.watching(opened, route, fast)

    def telling(stream: object) -> float:
        told.append(1)
        due_s = seen(stream)  # type: ignore[arg-type]  # the attributes it reads
        marks.append((fast.mark_tokens, fast.mark_s))
        return due_s

    client = Client()
    stream: Any = watch  # what the relay reads of a StreamGrammar
    redactor = runtime.responder.redactor
    outcome = await relay(opened, stream, [], redactor, client.receive, client.send, telling)
    plain_marks = []
    for last_s, count in reads:
        if not plain.started:
            plain.start(count, last_s)
        else:
            plain.stretch(count, last_s)
        plain_marks.append((plain.mark_tokens, plain.mark_s))
    assert outcome == "ok"
    assert sorted(set(marks)) == sorted(set(plain_marks))
    assert (fast.tokens, fast.last_s) == (plain.tokens, plain.last_s)
    assert fast.rest() == plain.rest()
    assert len(told) < len(reads) / 2  # most reads are not told

"""Engine priority on a real vLLM: interactive requests overtake batch requests queued earlier.

The session's server runs `--scheduling-policy priority` with 16 sequences. The gateway's
classes set `engine_priority` (batch 10, interactive 0: lower runs first) and its endpoint
declares `priority_scheduling`, so the gateway adds `priority` to every body; its admission is
blind to the engine here (`max_gauge_age_s` tiny), so everything is forwarded and the engine
alone orders the queue. 32 batch requests arrive first: the first 16 run and the other 16
wait. The 16 that run end in two waves, 8 after 220 tokens and 8 after 440, seconds apart.
A second after the last batch request, 8 interactive requests of 250 tokens arrive. First come,
first served, the first wave's sequences go to waiting batch requests and the interactive ones
start after those; by priority, they take the first wave's sequences, and the waiting batch
requests start only when the second wave or the interactive requests end, seconds later.
The margins are seconds wide because on two cores beside the engine the client and the gateway
(in this process) can be late by that much: with a thread per stream, CI saw streams arrive
in bursts seconds late, and the first requests paused the sends. So one event loop sends
everything, the 16 that run are not streamed, and one warm-up request of each kind goes first.
Measured: the share of (interactive, waiting batch) pairs whose interactive request had its
first token first, and the mean times to first token from the moment the interactive
requests were sent.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from tests.engines.stack import EXACT_LENGTH, async_sdk_client, gateway_over
from tests.engines.vllm_server import TEST_TIMEOUT_S, VllmServer
from tests.engines.workload import prompt, sample_sum
from tests.fixtures.gateway import PUBLIC_MODEL, eventually
from tests.fixtures.servers import UvicornThread

pytestmark = [pytest.mark.engine, pytest.mark.timeout(TEST_TIMEOUT_S)]
MAX_NUM_SEQS = 16  # the session server's ServeParams
BATCH_SEED = 500  # seeds of the batch prompts (the two warm-up requests: the two before)
BATCH_REQUESTS = 2 * MAX_NUM_SEQS
INTERACTIVE_REQUESTS = 8
PROMPT_TOKENS = 40
# Running: 8 x (40 + 440) and 8 x (40 + 250) tokens at most, 6,160 of the 8,192-token cache
# (56 of its 64 blocks): nothing is preempted.
FIRST_WAVE_TOKENS, SECOND_WAVE_TOKENS = 220, 440
INTERACTIVE_TOKENS = 250  # the waiting batch requests start no sooner than these end
WAITING_TOKENS = 96
# The engine's /metrics is no trigger: while it streams, it answered seconds late (a first wave
# had ended by then). The first wave takes 3 s here, 5 s beside a busy core.
SETTLE_S = 1.0
CLASSES = {
    "interactive": {"ttft_ms": 1000, "priority": 10, "engine_priority": 0},
    "batch": {"deadline_ms": 600000, "priority": 0, "sheddable": True, "engine_priority": 10},
}


@dataclass(frozen=True, slots=True)
class Timed:
    sent_s: float
    first_s: float  # when the first content token arrived

    @property
    def ttft_s(self) -> float:
        return self.first_s - self.sent_s


async def timed(client: openai.AsyncOpenAI, slo_class: str, seed: int, max_tokens: int) -> Timed:
    """One streamed chat of `slo_class`, read to its end, with when its first token came."""
    sent_s, first_s = time.perf_counter(), None
    async for chunk in await _chat(client, slo_class, seed, max_tokens, stream=True):
        if first_s is None and chunk.choices and chunk.choices[0].delta.content:
            first_s = time.perf_counter()
    assert first_s is not None, f"{slo_class} request {seed} streamed no content"
    return Timed(sent_s, first_s)


async def held(client: openai.AsyncOpenAI, seed: int, max_tokens: int) -> None:
    """One batch request that holds a sequence for `max_tokens` tokens, not streamed: on two
    cores beside the engine, parsing 16 more streams slowed the client (and the gateway in
    its process) enough to send the last batch requests seconds late."""
    await _chat(client, "batch", seed, max_tokens, stream=False)


async def _chat(
    client: openai.AsyncOpenAI, slo_class: str, seed: int, max_tokens: int, *, stream: bool
) -> Any:
    """One chat of `slo_class` (Any: the SDK types its answer by a literal `stream`)."""
    return await client.chat.completions.create(
        model=PUBLIC_MODEL,
        messages=[{"role": "user", "content": prompt(PROMPT_TOKENS, seed)}],
        max_tokens=max_tokens,
        stream=stream,
        extra_body=EXACT_LENGTH,
        extra_headers={"x-slo-class": slo_class},
    )


@pytest.mark.flaky(reruns=2)
def test_interactive_requests_overtake_batch_requests_queued_before_them(
    vllm: VllmServer,
) -> None:
    sections = {"classes": CLASSES, "admission": {"max_gauge_age_s": 1e-6}}
    declares = {"priority_scheduling": True}
    with gateway_over(vllm, declares, **sections) as gateway:
        sent_s, batch, interactive = asyncio.run(_requests(gateway))
    # A waiting batch request that started before the interactive requests came (it overtook a
    # running one on the way in) is left out.
    queued = [b for b in batch if b.first_s > sent_s]
    overtaken = sum(i.first_s < b.first_s for i in interactive for b in queued)
    share = overtaken / (len(queued) * len(interactive))
    interactive_ttft = statistics.fmean(i.ttft_s for i in interactive)
    queued_ttft = statistics.fmean(b.ttft_s for b in queued)
    since_s = statistics.fmean(b.first_s - sent_s for b in queued)
    print(
        f"{len(queued)} batch requests queued when {len(interactive)} interactive ones "
        f"arrived: {share:.0%} of the pairs overtaken; TTFT mean interactive "
        f"{interactive_ttft:.2f} s, queued batch {queued_ttft:.2f} s "
        f"({since_s:.2f} s after the interactive ones were sent)"
    )
    assert len(queued) >= BATCH_REQUESTS - MAX_NUM_SEQS - 2
    assert share >= 0.9
    assert interactive_ttft < 0.6 * since_s
    assert eventually(lambda: _queue(vllm) == (0, 0), 10)


async def _requests(gateway: UvicornThread) -> tuple[float, list[Timed], list[Timed]]:
    """The 32 batch requests in order, then, 1 s after the last, the 8 interactive ones:
    when those were sent, and the waiting batch requests and the interactive ones as they
    ended. One client on one event loop: a thread per stream starved the gateway, in this
    process, of the GIL."""
    async with async_sdk_client(gateway) as client:
        # Warm: the client's and the gateway's first requests paused the sends for 1.3 s, so
        # the first three ran alone and ended early, freeing sequences for waiting ones.
        await held(client, BATCH_SEED - 1, 1)
        await timed(client, "interactive", BATCH_SEED - 2, 1)
        running, waiting = [], []
        for index in range(BATCH_REQUESTS):
            seed = BATCH_SEED + index
            if index < MAX_NUM_SEQS:  # the first 8 end in the first wave, the next 8 later
                tokens = FIRST_WAVE_TOKENS if index < MAX_NUM_SEQS // 2 else SECOND_WAVE_TOKENS
                running.append(asyncio.create_task(held(client, seed, tokens)))
            else:
                waiting.append(asyncio.create_task(timed(client, "batch", seed, WAITING_TOKENS)))
            await asyncio.sleep(0.02)  # arrival order = index order
        await asyncio.sleep(SETTLE_S)  # for the last batch requests to reach the engine
        sent_s = time.perf_counter()
        interactive = [
            asyncio.create_task(timed(client, "interactive", 600 + i, INTERACTIVE_TOKENS))
            for i in range(INTERACTIVE_REQUESTS)
        ]
        await asyncio.gather(*running)
        return sent_s, await asyncio.gather(*waiting), await asyncio.gather(*interactive)


def _queue(server: VllmServer) -> tuple[float, float]:
    """(running, waiting) on the engine's own /metrics."""
    page = server.metrics()
    return (
        sample_sum(page, "vllm:num_requests_running"),
        sample_sum(page, "vllm:num_requests_waiting"),
    )

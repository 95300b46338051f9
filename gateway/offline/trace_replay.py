"""A trace fitted to a scenario's fleet: the `trace:` section of a scenario, and `--trace`.

From the rows of a trace (gateway/offline/trace.py) to the planned requests both drivers send:
1. Window: the rows arriving in [start_s, start_s + duration_s) of the trace (0 = its first
   arrival); arrivals are shifted so the window starts at 0, then divided by `speedup`.
2. Tokens: prompt and output lengths, and the trace's block size, are multiplied by
   `token_scale` (at least one token each), so a trace keeps its shape on a smaller fleet;
   a prompt is then cut to `max_prompt_tokens`, its leading blocks kept.
3. Class: `class_by_prompt` bands (the first whose `up_to_tokens` holds the prompt), else the
   class the row has (its column, `class_column`, or the default); `class_of_tenant` maps a
   tenant to its class.
4. Prefixes: a row with block ids gets text, each id one fixed block of text (`block_text`:
   words of 4 characters, one token each at the simulated servers' chars/4) wherever it
   appears, the last block cut to the prompt's remainder. Requests that shared a prefix in
   production share it in the replay, as text: the engines' prefix caches and the gateway's
   prefix index find it as they would in production. A row without ids keeps a unique prompt.
"""

from __future__ import annotations

import functools
import random
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from gateway.offline.trace import (
    Columns,
    PlannedRequest,
    PromptedRequest,
    TraceError,
    TraceRow,
    read_rows,
)
from gateway.sim.wire import engine_prompt_tokens, prompt_text

_WORDS = [f"{a}{b}{c} " for a in "bdfgklmnprst" for b in "aeiou" for c in "nrstlm"]


class PromptBand(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    up_to_tokens: int = Field(ge=1)
    slo_class: str


class TraceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    path: Path
    start_s: float = Field(default=0.0, ge=0, description="window start, from the first arrival")
    duration_s: float | None = Field(default=None, gt=0, description="window length; None: all")
    speedup: float = Field(default=1.0, gt=0, description="arrivals come this many times faster")
    token_scale: float = Field(default=1.0, gt=0, description="multiplies every token count")
    max_prompt_tokens: int | None = Field(default=None, ge=1)
    requests: int | None = Field(default=None, ge=1, description="the first N of the window")
    default_tenant: str = "default"
    default_class: str = "interactive"
    tenant_column: str | None = None
    class_column: str | None = None
    class_by_prompt: list[PromptBand] = Field(default_factory=list)
    class_of_tenant: dict[str, str] = Field(default_factory=dict)

    def plan(self, model: str) -> list[PlannedRequest]:
        """The window's requests as both drivers send them (TraceError: an empty window)."""
        return [self._request(row, model) for row in self._rows()]

    def cache_bound(self) -> float:
        """The share of prompt tokens an unbounded cache could have served: each request's
        leading blocks whose whole prefix an earlier request sent, over all prompt tokens (an
        offline upper bound for `cached_share`; 0 without block ids)."""
        seen: set[tuple[int, ...]] = set()
        cached = total = 0
        for row in self._rows():
            prompt_tokens = self._prompt_tokens(row)
            ids = row.hash_ids
            run = 0
            while run < len(ids) and ids[: run + 1] in seen:
                run += 1
            cached += min(prompt_tokens, run * _scaled(row.block_tokens, self.token_scale))
            total += prompt_tokens
            seen.update(ids[:n] for n in range(1, len(ids) + 1))
        return cached / total if total else 0.0

    def _rows(self) -> list[TraceRow]:
        columns = Columns(
            self.default_tenant, self.default_class, self.tenant_column, self.class_column
        )
        return self._window(read_rows(self.path, columns))[: self.requests]

    def _prompt_tokens(self, row: TraceRow) -> int:
        tokens = _scaled(row.prompt_tokens, self.token_scale)
        return tokens if self.max_prompt_tokens is None else min(tokens, self.max_prompt_tokens)

    def _window(self, rows: list[TraceRow]) -> list[TraceRow]:
        end_s = self.start_s + self.duration_s if self.duration_s is not None else float("inf")
        window = [r for r in rows if self.start_s <= r.arrival_s < end_s]
        if not window:
            span_s = rows[-1].arrival_s if rows else 0.0
            raise TraceError(
                f"{self.path}: the window [{self.start_s:g} s, {end_s:g} s) holds no request "
                f"(the trace has {len(rows)} over {span_s:g} s)"
            )
        return window

    def _request(self, row: TraceRow, model: str) -> PlannedRequest:
        arrival_s = (row.arrival_s - self.start_s) / self.speedup
        prompt_tokens = self._prompt_tokens(row)
        output_tokens = _scaled(row.output_tokens, self.token_scale)
        slo_class = self._class(row, prompt_tokens)
        if not row.hash_ids:
            return PlannedRequest(arrival_s, prompt_tokens, output_tokens, row.tenant, slo_class)
        block_tokens = _scaled(row.block_tokens, self.token_scale)
        content = prompt_of(row.hash_ids, block_tokens, prompt_tokens)
        body = {"model": model, "messages": [{"role": "user", "content": content}]}
        return PromptedRequest(
            arrival_s,
            engine_prompt_tokens(body, "chat"),
            output_tokens,
            row.tenant,
            slo_class,
            body,
            prompt_text(body, "chat"),
        )

    def _class(self, row: TraceRow, prompt_tokens: int) -> str:
        for band in self.class_by_prompt:
            if prompt_tokens <= band.up_to_tokens:
                return band.slo_class
        return self.class_of_tenant.get(row.tenant, row.slo_class)


def prompt_of(hash_ids: tuple[int, ...], block_tokens: int, prompt_tokens: int) -> str:
    """The prompt's text: its blocks in order, cut to `prompt_tokens` tokens."""
    blocks = []
    left = prompt_tokens
    for block_id in hash_ids:
        if left <= 0:
            break
        blocks.append(block_text(block_id, min(left, block_tokens)))
        left -= block_tokens
    return "".join(blocks)


def block_text(block_id: int, tokens: int) -> str:
    """The first `tokens` tokens of block `block_id`'s fixed text (4 characters a token)."""
    return _block(block_id, tokens)


@functools.lru_cache(maxsize=4096)  # a popular block recurs in many prompts
def _block(block_id: int, tokens: int) -> str:
    return "".join(random.Random(f"block:{block_id}").choices(_WORDS, k=tokens))


def _scaled(tokens: int, scale: float) -> int:
    return max(1, round(tokens * scale))

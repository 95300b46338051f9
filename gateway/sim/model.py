"""A clock-free model of one vLLM replica: continuous batching over a paged KV pool.

The model never reads a clock: `step()` returns how long the step takes and the caller decides
what a second is (real time behind HTTP in `engine.py`, virtual time in the offline simulator).

Each `step()` follows the vLLM V1 scheduler, simplified:
1. Running sequences, oldest admission first, each get their next tokens within the per-step
   token budget `max_num_batched_tokens`: one token for a decoding sequence, a prefill chunk for
   one still prefilling (chunked prefill). A sequence needs KV blocks for its whole context
   (`prompt + generated` tokens, `block_size` tokens per block); when the pool is empty the
   most recently admitted sequence is preempted (recompute: its blocks are freed and it goes
   back to the front of the waiting queue, to re-prefill prompt and generated tokens later).
2. If nothing was preempted, waiting requests join, strictly FCFS, while the batch has fewer
   than `max_num_seqs` sequences and the head's context fits in the free blocks. With prefix
   caching (on unless `enable_prefix_caching` is off; `prefix_cache.py` has the method), a
   request submitted with block hashes first takes the longest run of its blocks the cache
   holds, at most `(context - 1) // block_size` of them (vLLM always computes the last token
   again): those blocks are shared with any running sequence that holds them, and prefill starts
   after them. Computed prefill blocks are stored as they fill; blocks filled while decoding
   are stored when the sequence ends (finish, preemption, cancel), so a finished request's
   answer is cached for the next turn that replays it. No hashing happens here: the caller
   passes the hashes (`prompt_blocks.py`), and a request without them never hits.
3. Step duration, with B sequences in the step, S their context tokens, and a prefill chunk of
   n tokens on top of p already computed:
       step_base + per_seq * B + per_kv_token * S + sum(prefill_per_token * n
                                                        + prefill_quadratic * n * (n + 2p))
   times `slowdown`. Every sequence whose context is complete after the step emits one token.

Defaults follow vLLM 0.32 as measured on a small CPU host
(TTFT 35 / 274 ms at 100 / 1000 prompt tokens, TPOT 10-16 ms at concurrency 1-8), so tests run
at realistic shapes and speeds: an unloaded 100-token prompt gets its first token in ~40 ms, and
decoding takes ~15 ms per token at batch 1, ~19 ms at 8 and ~32 ms at 32.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.sim.prefix_cache import PrefixCache


class EngineParams(BaseModel):
    """Capacity and cost coefficients of one simulated replica (times in seconds)."""

    model_config = ConfigDict(extra="forbid")

    block_size: int = Field(default=16, ge=1)
    num_gpu_blocks: int = Field(default=2048, ge=1)
    max_num_seqs: int = Field(default=64, ge=1)
    max_num_batched_tokens: int = Field(default=2048, ge=1)
    max_model_len: int = Field(default=8192, ge=1)
    enable_prefix_caching: bool = True
    step_base_s: float = Field(default=0.015, ge=0)
    per_seq_s: float = Field(default=0.0003, ge=0)
    per_kv_token_s: float = Field(default=3e-7, ge=0)
    prefill_per_token_s: float = Field(default=0.00025, ge=0)
    prefill_quadratic_s: float = Field(default=2e-8, ge=0, description="per token squared")

    @model_validator(mode="after")
    def _one_sequence_fits(self) -> EngineParams:
        # A sequence longer than the pool could never run: it would preempt itself forever.
        if self.max_model_len > self.num_gpu_blocks * self.block_size:
            raise ValueError("max_model_len exceeds the KV pool (num_gpu_blocks * block_size)")
        return self


class PromptTooLong(ValueError):
    """prompt + max_tokens exceeds max_model_len (vLLM answers 400)."""


@dataclass(slots=True)
class _Sequence:
    req_id: str
    prompt_tokens: int
    max_tokens: int
    generated: int = 0
    hashes: Sequence[int] = ()  # of the full blocks of prompt and output, chained
    computed: int = 0  # context tokens whose KV is in the cache
    blocks: int = 0
    shared: int = 0  # the first `shared` blocks are held through the prefix cache
    cached_tokens: int = -1  # found in the prefix cache at the first admission (-1: not yet)
    running: bool = False

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + self.generated


@dataclass(slots=True)
class StepResult:
    duration_s: float
    tokens_emitted: list[tuple[str, int]] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    prefix_hits: tuple[tuple[str, int], ...] = ()  # (req_id, cached tokens) at first admission


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    running: int
    waiting: int
    waiting_capacity: int
    waiting_deferred: int
    used_blocks: int
    num_gpu_blocks: int
    block_size: int
    preemptions_total: int
    prompt_tokens_total: int
    generation_tokens_total: int
    enable_prefix_caching: bool
    prefix_cache_queries_total: int  # prompt tokens of admitted requests
    prefix_cache_hits_total: int  # of them found in the prefix cache

    @property
    def kv_usage(self) -> float:
        """Fraction 0..1 of the KV pool in use."""
        return self.used_blocks / self.num_gpu_blocks

    @property
    def prefix_hit_rate(self) -> float:
        """Fraction 0..1 of queried prompt tokens found in the prefix cache."""
        return self.prefix_cache_hits_total / max(1, self.prefix_cache_queries_total)


@dataclass(slots=True)
class _StepCost:
    sequences: int = 0
    context_tokens: int = 0
    prefill_s: float = 0.0


class EngineModel:
    """One replica's scheduler state; O(batch) work per step."""

    def __init__(self, params: EngineParams) -> None:
        self.params = params
        self.slowdown = 1.0
        self._waiting: deque[_Sequence] = deque()
        self._running: list[_Sequence] = []
        self._by_id: dict[str, _Sequence] = {}
        self._left_waiting = 0  # requests the last step could not admit (see `snapshot`)
        self._free_blocks = params.num_gpu_blocks  # empty blocks plus the cache's evictable ones
        self._cache = PrefixCache()
        self.preemptions_total = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.prefix_cache_queries_total = 0
        self.prefix_cache_hits_total = 0

    @property
    def has_work(self) -> bool:
        return bool(self._running or self._waiting)

    def submit(
        self, req_id: str, prompt_tokens: int, max_tokens: int, block_hashes: Sequence[int] = ()
    ) -> None:
        """Queue a request; `block_hashes` chain its full blocks (`prompt_blocks.py`), if known."""
        if prompt_tokens < 1 or max_tokens < 1:
            raise ValueError("prompt_tokens and max_tokens must be at least 1")
        if prompt_tokens + max_tokens > self.params.max_model_len:
            raise PromptTooLong(
                f"This model's maximum context length is {self.params.max_model_len} tokens; "
                f"the request asks for {prompt_tokens + max_tokens}"
            )
        if req_id in self._by_id:
            raise ValueError(f"duplicate request id {req_id!r}")
        hashes = block_hashes if self.params.enable_prefix_caching else ()
        seq = _Sequence(req_id, prompt_tokens, max_tokens, hashes=hashes)
        self._by_id[req_id] = seq
        self._waiting.append(seq)

    def cancel(self, req_id: str) -> bool:
        """Abort a request (client gone): frees its blocks. False if it was unknown or done."""
        seq = self._by_id.pop(req_id, None)
        if seq is None:
            return False
        if seq.running:
            self._running.remove(seq)
            self._release(seq)
        else:
            self._waiting.remove(seq)
        return True

    def step(self) -> StepResult:
        result = StepResult(duration_s=0.0)
        if not self.has_work:
            self._left_waiting = 0
            return result
        cost = _StepCost()
        budget = self._schedule_running(cost, result)
        if not result.preempted:
            self._admit(budget, cost, result)
        self._left_waiting = len(self._waiting)
        result.duration_s = self._duration_s(cost) if cost.sequences else 0.0
        if result.finished:
            # Preempted sequences already left the batch: only finished ones are left to drop.
            self._running = [seq for seq in self._running if seq.running]
        return result

    def snapshot(self) -> EngineSnapshot:
        """The engine's gauges as vLLM records them: after a step's scheduling. Its waiting
        count is what that step could not admit (a wait for slots, blocks or token budget), not
        requests that arrived since and join at the next step: those waited for no capacity,
        and a scrape between steps that counted them showed a queue on an idle engine."""
        p = self.params
        waiting = min(self._left_waiting, len(self._waiting))  # less any cancelled since
        return EngineSnapshot(
            running=len(self._running),
            waiting=waiting,
            waiting_capacity=waiting,
            waiting_deferred=0,
            used_blocks=p.num_gpu_blocks - self._free_blocks,
            num_gpu_blocks=p.num_gpu_blocks,
            block_size=p.block_size,
            preemptions_total=self.preemptions_total,
            prompt_tokens_total=self.prompt_tokens_total,
            generation_tokens_total=self.generation_tokens_total,
            enable_prefix_caching=p.enable_prefix_caching,
            prefix_cache_queries_total=self.prefix_cache_queries_total,
            prefix_cache_hits_total=self.prefix_cache_hits_total,
        )

    def _schedule_running(self, cost: _StepCost, result: StepResult) -> int:
        # This loop runs for every sequence of every step (the offline simulator's hottest code),
        # and most sequences decode one token, so that case is inlined with locals: no method or
        # property calls, and the pool is consulted only when the context outgrows its blocks.
        # Prefill chunks, block growth and preemption keep to the helpers below.
        budget = self.params.max_num_batched_tokens
        block_size = self.params.block_size
        emit = result.tokens_emitted.append
        decoded = 0
        decoded_context_tokens = 0
        for seq in self._running:  # a preemption pops the tail, which ends the loop early
            if budget <= 0:
                break
            generated = seq.generated
            context = seq.prompt_tokens + generated
            if context > seq.blocks * block_size and not self._ensure_blocks(seq, result):
                break  # the sequence preempted itself: nothing after it is still running
            if generated and seq.computed == context - 1:
                seq.computed = context
                budget -= 1
                decoded += 1
                decoded_context_tokens += context
                emit((seq.req_id, generated))
                seq.generated = generated = generated + 1
                if generated >= seq.max_tokens:
                    self._finish(seq, result)
            else:
                budget -= self._run_chunk(seq, budget, cost, result)
        cost.sequences += decoded
        cost.context_tokens += decoded_context_tokens
        self.generation_tokens_total += decoded
        return budget

    def _admit(self, budget: int, cost: _StepCost, result: StepResult) -> None:
        while self._waiting and budget > 0 and len(self._running) < self.params.max_num_seqs:
            seq = self._waiting[0]
            needed = self._blocks_for(seq.context_tokens)
            if needed > self._free_blocks and not self._fits_with_hits(seq, needed):
                break  # FCFS: a head that does not fit blocks everyone behind it
            self._waiting.popleft()
            seq.running = True
            self._running.append(seq)
            if seq.hashes:
                self._reuse_cached(seq)
            if seq.cached_tokens < 0:
                self._count_query(seq, result)
            self._ensure_blocks(seq, result)
            budget -= self._run_chunk(seq, budget, cost, result)

    def _fits_with_hits(self, seq: _Sequence, needed: int) -> bool:
        """Whether seq fits once cached blocks that running sequences hold are counted."""
        if not seq.hashes:
            return False
        _, held = self._cache.match(seq.hashes, self._hit_limit(seq))
        return needed - held <= self._free_blocks

    def _reuse_cached(self, seq: _Sequence) -> None:
        hits, taken = self._cache.acquire(seq.hashes, self._hit_limit(seq))
        self._free_blocks -= taken
        seq.blocks = seq.shared = hits
        seq.computed = hits * self.params.block_size

    def _hit_limit(self, seq: _Sequence) -> int:
        return (seq.context_tokens - 1) // self.params.block_size

    def _count_query(self, seq: _Sequence, result: StepResult) -> None:
        # As vLLM: counted once per request, not again when a preempted one resumes.
        seq.cached_tokens = seq.computed
        if self.params.enable_prefix_caching:
            self.prefix_cache_queries_total += seq.prompt_tokens
            self.prefix_cache_hits_total += seq.computed
        if seq.computed:
            result.prefix_hits += ((seq.req_id, seq.computed),)

    def _ensure_blocks(self, seq: _Sequence, result: StepResult) -> bool:
        """Grow seq's blocks to hold its context, preempting from the batch tail if needed."""
        needed = self._blocks_for(seq.context_tokens) - seq.blocks
        if needed <= 0:
            return True
        while needed > self._free_blocks:
            victim = self._running.pop()
            self._preempt(victim, result)
            if victim is seq:
                return False
        cached = self._cache.lru
        if cached and needed > self._free_blocks - len(cached):
            self._cache.evict(needed - (self._free_blocks - len(cached)))
        self._free_blocks -= needed
        seq.blocks += needed
        return True

    def _run_chunk(self, seq: _Sequence, budget: int, cost: _StepCost, result: StepResult) -> int:
        """Schedule seq's next tokens in this step; returns the budget they used."""
        new_tokens = min(seq.context_tokens - seq.computed, budget)
        if new_tokens > 1 or seq.generated == 0:
            prior = seq.computed
            p = self.params
            cost.prefill_s += p.prefill_per_token_s * new_tokens
            cost.prefill_s += p.prefill_quadratic_s * new_tokens * (new_tokens + 2 * prior)
        seq.computed += new_tokens
        if seq.shared < len(seq.hashes):
            self._store_computed(seq)
        cost.sequences += 1
        cost.context_tokens += seq.computed
        if seq.computed == seq.context_tokens:
            self._emit(seq, result)
        return new_tokens

    def _emit(self, seq: _Sequence, result: StepResult) -> None:
        result.tokens_emitted.append((seq.req_id, seq.generated))
        if seq.generated == 0:
            self.prompt_tokens_total += seq.prompt_tokens
        seq.generated += 1
        self.generation_tokens_total += 1
        if seq.generated >= seq.max_tokens:
            self._finish(seq, result)

    def _finish(self, seq: _Sequence, result: StepResult) -> None:
        seq.running = False
        self._release(seq)
        del self._by_id[seq.req_id]
        result.finished.append(seq.req_id)

    def _preempt(self, seq: _Sequence, result: StepResult) -> None:
        self._release(seq)
        seq.running = False
        seq.computed = 0
        self._waiting.appendleft(seq)
        self.preemptions_total += 1
        result.preempted.append(seq.req_id)

    def _store_computed(self, seq: _Sequence) -> None:
        """Store seq's blocks that are full and computed under their hashes."""
        full = min(seq.computed // self.params.block_size, len(seq.hashes))
        for block_hash in seq.hashes[seq.shared : full]:
            self._free_blocks += self._cache.store(block_hash)
        seq.shared = max(seq.shared, full)

    def _release(self, seq: _Sequence) -> None:
        # Its own blocks (the unhashed tail) become empty; stored ones stay cached, tail first.
        if seq.hashes:
            self._store_computed(seq)
            self._free_blocks += self._cache.release(seq.hashes[: seq.shared])
        self._free_blocks += seq.blocks - seq.shared
        seq.blocks = seq.shared = 0

    def _blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.params.block_size)

    def _duration_s(self, cost: _StepCost) -> float:
        p = self.params
        base = p.step_base_s + p.per_seq_s * cost.sequences + p.per_kv_token_s * cost.context_tokens
        return (base + cost.prefill_s) * self.slowdown

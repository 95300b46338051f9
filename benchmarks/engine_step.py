"""Cost of one simulated engine step (`EngineModel.step`), µs per step and per sequence-step.

Run: .venv/bin/python -m benchmarks.engine_step

The offline simulator's fleet20 runs about 16 sequences per step, most of them decoding one
token; this keeps 16 requests in the engine (chat-like prompts and outputs, a new request as
soon as one finishes) and times `step()` alone, best of a few rounds.
"""

from __future__ import annotations

import random
import time

from gateway.sim.model import EngineModel, EngineParams

CONCURRENCY = 16
STEPS = 20_000
ROUNDS = 5


def one_round(seed: int) -> tuple[float, int]:
    """Seconds spent in step() and sequences in the batch summed over STEPS steps."""
    rng = random.Random(seed)
    model = EngineModel(EngineParams())
    submitted = finished = 0
    sequence_steps = 0
    spent_s = 0.0
    for _ in range(STEPS):
        while submitted - finished < CONCURRENCY:
            model.submit(f"r{submitted}", rng.randint(20, 1000), rng.randint(10, 250))
            submitted += 1
        start = time.perf_counter()
        result = model.step()
        spent_s += time.perf_counter() - start
        finished += len(result.finished)
        sequence_steps += model.snapshot().running + len(result.finished)
    return spent_s, sequence_steps


def main() -> None:
    best_s, sequence_steps = min(one_round(seed=1) for _ in range(ROUNDS))
    per_step = sequence_steps / STEPS
    print(f"{STEPS} steps, {per_step:.1f} sequences per step, best of {ROUNDS} rounds")
    per_sequence_ns = best_s / sequence_steps * 1e9
    print(f"{best_s / STEPS * 1e6:.2f} µs per step, {per_sequence_ns:.0f} ns per sequence-step")


if __name__ == "__main__":
    main()

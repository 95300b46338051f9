"""Cost of prompt-token estimation on a 32k-token prompt, in µs per call.

Run: .venv/bin/python -m benchmarks.token_estimate_speed

Three shapes of the same 32k tokens: one message, 256 messages, and content-part lists. For
scale, the last line times `json.dumps` of the one-message body, which the estimate avoids.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from gateway.core.tokens import estimate_prompt_tokens

PROMPT_TOKENS = 32_000
CHARS = PROMPT_TOKENS * 4
REPEATS = 7


def bodies() -> dict[str, dict[str, Any]]:
    text = ("The quick brown fox jumps over the lazy dog. " * (CHARS // 45 + 1))[:CHARS]
    piece = len(text) // 256
    chunks = [text[i * piece : (i + 1) * piece] for i in range(256)]
    return {
        "1 message": {"messages": [{"role": "user", "content": text}]},
        "256 messages": {"messages": [{"role": "user", "content": c} for c in chunks]},
        "256 text parts": {
            "messages": [{"role": "user", "content": [{"type": "text", "text": c} for c in chunks]}]
        },
    }


def per_call_us(call: Callable[[], object], calls: int) -> float:
    """Median over REPEATS runs of the mean time per call."""
    runs = []
    for _ in range(REPEATS):
        started = time.perf_counter_ns()
        for _ in range(calls):
            call()
        runs.append((time.perf_counter_ns() - started) / calls / 1000)
    return statistics.median(runs)


def main() -> None:
    print(f"prompt-token estimate, {PROMPT_TOKENS} tokens ({CHARS} characters)")
    shapes = bodies()
    for label, body in shapes.items():
        tokens = estimate_prompt_tokens(body)
        cost_us = per_call_us(partial(estimate_prompt_tokens, body), calls=2000)
        print(f"  {label:<16} {cost_us:8.2f} µs/call  -> {tokens} tokens")
    one = shapes["1 message"]
    dumps_us = per_call_us(lambda: json.dumps(one), calls=50)
    print(f"  {'json.dumps':<16} {dumps_us:8.2f} µs/call  (what the estimate does not do)")


if __name__ == "__main__":
    main()

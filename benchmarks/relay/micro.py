"""JSON on the hot path, json vs orjson: the body rewrite and the SSE event parse, µs per call.

The rewrite is what a relay does per request (parse the body, set the upstream `model`,
serialise it to bytes); the event parse is what the gateway's stream watch does for the first
content event and the usage event of every stream.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.relay.backend import stream_frames
from benchmarks.relay.load import chat_request

ROUNDS = 5


def chat_body(words: int) -> bytes:
    prompt = " ".join(f"word{i % 97}" for i in range(words))
    return json.dumps(chat_request(prompt, max_tokens=256, stream=True)).encode()


def _rewrite_json(raw: bytes) -> bytes:
    body = json.loads(raw)
    body["model"] = "bench-upstream"
    return json.dumps(body).encode()


def _time_us(work: Callable[[bytes], object], raw: bytes, calls: int) -> float:
    costs = []
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for _ in range(calls):
            work(raw)
        costs.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(costs)


def _event() -> bytes:
    frame = stream_frames(1)[1]
    return frame[frame.index(b"data: ") + 6 : frame.rindex(b"\n\n")]


def measure(quick: bool) -> dict[str, dict[str, Any]]:
    try:
        import orjson
    except ImportError:
        return {}

    def rewrite_orjson(raw: bytes) -> bytes:
        body = orjson.loads(raw)
        body["model"] = "bench-upstream"
        return orjson.dumps(body)

    calls = 200 if quick else 2000
    cases = (
        ("rewrite, 60-word prompt", _rewrite_json, rewrite_orjson, chat_body(60)),
        ("rewrite, 6,000-word prompt", _rewrite_json, rewrite_orjson, chat_body(6000)),
        ("parse one SSE event", json.loads, orjson.loads, _event()),
    )
    results = {}
    for name, slow, fast, raw in cases:
        json_us, orjson_us = _time_us(slow, raw, calls), _time_us(fast, raw, calls)
        results[name] = {
            "bytes": len(raw),
            "json_us": json_us,
            "orjson_us": orjson_us,
            "speedup": json_us / orjson_us,
        }
    return results

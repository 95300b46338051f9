"""Writes the sample traces beside this file: one generated workload in four formats.

    python -m loadtests.traces.make_samples

Generated (seeded), not excerpted: no row comes from a public trace. The workload is shaped
like the Mooncake conversation trace at a small scale: chat sessions over four shared system
prompts (Zipf popularity), each turn replaying the session so far plus a new message, and
one-off requests beside them. Blocks are 512 tokens as in Mooncake's `hash_ids`; a prompt's
last block is its own, so a shared block is always a whole one.

    mooncake.jsonl  {"timestamp": ms, "input_length", "output_length", "hash_ids"}
    ours.jsonl      arrival_s, prompt_tokens, output_tokens, tenant, slo_class, hash_ids,
                    block_tokens (tenants: the session's app, or `jobs` for one-off requests)
    azure.csv       TIMESTAMP (date-time), ContextTokens, GeneratedTokens
    burstgpt.csv    Timestamp (s), Model, Request tokens, Response tokens, Total tokens, Log Type
"""

from __future__ import annotations

import csv
import itertools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

BLOCK_TOKENS = 512
HERE = Path(__file__).parent
_EPOCH = datetime(2024, 5, 1, 12, 0, 0)


@dataclass(frozen=True, slots=True)
class Row:
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    hash_ids: list[int]
    session: bool  # a chat turn (else a one-off request)


def generate(seed: int = 7) -> list[Row]:
    rng = random.Random(seed)
    ids = itertools.count()
    systems = [[next(ids), next(ids)] for _ in range(4)]  # 2 blocks each
    rows = []
    for _ in range(16):  # sessions
        history = list(rng.choices(systems, weights=[1, 0.5, 0.33, 0.25])[0])
        at_s = rng.uniform(0, 40)
        for _ in range(3):  # turns
            history.append(next(ids))  # the new message and the previous answer
            tail = rng.randint(16, BLOCK_TOKENS - 16)  # this request's own partial block
            prompt = BLOCK_TOKENS * len(history) + tail
            rows.append(Row(at_s, prompt, rng.randint(16, 120), [*history, next(ids)], True))
            at_s += rng.uniform(4, 9)
    for _ in range(24):  # one-off requests: nothing shared
        blocks = rng.randint(0, 4)
        own = [next(ids) for _ in range(blocks + 1)]
        prompt = BLOCK_TOKENS * blocks + rng.randint(16, BLOCK_TOKENS - 16)
        rows.append(Row(rng.uniform(0, 60), prompt, rng.randint(16, 200), own, False))
    return sorted(rows, key=lambda r: r.arrival_s)


def write_all(rows: list[Row], folder: Path = HERE) -> None:
    with (folder / "mooncake.jsonl").open("w") as out:
        for r in rows:
            line = {
                "timestamp": round(r.arrival_s * 1000),
                "input_length": r.prompt_tokens,
                "output_length": r.output_tokens,
                "hash_ids": r.hash_ids,
            }
            out.write(json.dumps(line) + "\n")
    with (folder / "ours.jsonl").open("w") as out:
        for r in rows:
            line = {
                "arrival_s": round(r.arrival_s, 3),
                "prompt_tokens": r.prompt_tokens,
                "output_tokens": r.output_tokens,
                "tenant": "app" if r.session else "jobs",
                "slo_class": "interactive" if r.session else "batch",
                "hash_ids": r.hash_ids,
                "block_tokens": BLOCK_TOKENS,
            }
            out.write(json.dumps(line) + "\n")
    _csv(folder / "azure.csv", ["TIMESTAMP", "ContextTokens", "GeneratedTokens"], rows, _azure)
    header = ["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"]
    _csv(folder / "burstgpt.csv", header, rows, _burstgpt)


def _azure(r: Row) -> list[object]:
    stamp = _EPOCH + timedelta(seconds=r.arrival_s)
    return [stamp.isoformat(sep=" "), r.prompt_tokens, r.output_tokens]


def _burstgpt(r: Row) -> list[object]:
    model, kind = ("ChatGPT", "Conversation log") if r.session else ("GPT-4", "API log")
    total = r.prompt_tokens + r.output_tokens
    return [round(r.arrival_s), model, r.prompt_tokens, r.output_tokens, total, kind]


def _csv(
    path: Path, header: list[str], rows: list[Row], cells: Callable[[Row], list[object]]
) -> None:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(header)
        writer.writerows(cells(r) for r in rows)


if __name__ == "__main__":
    write_all(generate())

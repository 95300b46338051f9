"""Prediction against judgement for requests that do not stream, per request shape.

Run against a gateway (the demo fleet: `slo-gateway demo --port 8700` in another shell):
    .venv/bin/python -m benchmarks.whole_answers --url http://127.0.0.1:8700 --key sk-slo-demo

First `--warm` streamed chat requests, so the endpoints' statistics are measured; then, one at a
time, `--requests` light non-streamed requests of each shape (chat, completions, Responses,
Messages, embeddings) of `--max-tokens` tokens in the tenant's default class. Per shape: how many
the router predicted to meet their class (`x-slo-gateway-decision: slo_met`) and how many the
gateway judged met (its `slo_gateway_slo_total` counter, read from GET /metrics before and after
each request). They should agree: the router predicts what the judgement measures
(gateway/core/slo.py).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

import anthropic
import httpx
import openai
from anthropic.types import MessageParam
from openai.types.chat import ChatCompletionMessageParam

MODEL = "llama-3-8b"
PROMPT = "Say something short about the weather."
SHAPES = ("chat", "completions", "responses", "messages", "embeddings")
SAMPLE = re.compile(r'^slo_gateway_slo_total\{[^}]*result="(met|missed)"[^}]*\} (\S+)$', re.M)


def judged(url: str, headers: dict[str, str]) -> dict[str, float]:
    """Requests judged met and missed so far, every class and endpoint added up."""
    counts = {"met": 0.0, "missed": 0.0}
    for verdict, value in SAMPLE.findall(httpx.get(url + "/metrics", headers=headers).text):
        counts[verdict] += float(value)
    return counts


def _calls(oa: openai.OpenAI, an: anthropic.Anthropic, tokens: int) -> dict[str, Callable[[], Any]]:
    raw = oa.with_raw_response
    chat: list[ChatCompletionMessageParam] = [{"role": "user", "content": PROMPT}]
    messages: list[MessageParam] = [{"role": "user", "content": PROMPT}]
    return {
        "chat": lambda: raw.chat.completions.create(model=MODEL, messages=chat, max_tokens=tokens),
        "completions": lambda: raw.completions.create(
            model=MODEL, prompt=PROMPT, max_tokens=tokens
        ),
        "responses": lambda: raw.responses.create(
            model=MODEL, input=PROMPT, max_output_tokens=tokens
        ),
        "messages": lambda: an.messages.with_raw_response.create(
            model=MODEL, max_tokens=tokens, messages=messages
        ),
        "embeddings": lambda: raw.embeddings.create(model=MODEL, input=PROMPT),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--key", required=True, help="a tenant's API key")
    parser.add_argument("--metrics-token", default=None)
    parser.add_argument("--warm", type=int, default=12)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--max-tokens", type=int, default=32)
    args = parser.parse_args(argv)
    token = {"authorization": f"Bearer {args.metrics_token}"} if args.metrics_token else {}
    oa = openai.OpenAI(base_url=args.url + "/v1", api_key=args.key, max_retries=0)
    an = anthropic.Anthropic(base_url=args.url, api_key=args.key, max_retries=0)
    with oa, an:
        for _ in range(args.warm):
            warm = oa.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": PROMPT}],
                max_tokens=args.max_tokens,
                stream=True,
            )
            for _chunk in warm:
                pass
        lines = ["| shape | requests | predicted slo_met | judged met |", "|---|---|---|---|"]
        for shape, call in _calls(oa, an, args.max_tokens).items():
            predicted = met = 0
            for _ in range(args.requests):
                before = judged(args.url, token)["met"]
                predicted += call().headers.get("x-slo-gateway-decision") == "slo_met"
                met += round(judged(args.url, token)["met"] - before)
            lines.append(f"| {shape} | {args.requests} | {predicted} | {met} |")
    sys.stdout.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()

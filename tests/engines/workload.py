"""Prompts of a known size for the tiny model, and readings of Prometheus pages.

`prompt(tokens, seed)` draws Python keywords and builtin names with some small numbers, words
the tokenizer (trained on the stdlib) knows: about 1.36 tokens a word and 4 characters a token,
so the gateway's characters/4 estimate matches what vLLM counts and admission sees true
footprints. Each seed gives a different opening, so the prefix cache never serves one prompt
from another's blocks.
"""

from __future__ import annotations

import builtins
import keyword
import random

from prometheus_client.parser import text_string_to_metric_families

WORDS = sorted(
    set(keyword.kwlist) | {n for n in dir(builtins) if n.islower() and not n.startswith("_")}
)
TOKENS_PER_WORD = 1.36  # measured with tiny_model.py's tokenizer (1,351-1,370 per 1,000 words)
NUMBER_SHARE = 0.3


def prompt(tokens: int, seed: int) -> str:
    """About `tokens` tokens of text, different for every seed."""
    rng = random.Random(seed)
    count = round(tokens / TOKENS_PER_WORD)
    words = (
        str(rng.randrange(1000)) if rng.random() < NUMBER_SHARE else rng.choice(WORDS)
        for _ in range(count)
    )
    return f"{seed} " + " ".join(words)


def sample_sum(page: str, name: str, **labels: str) -> float:
    """The sum of every sample called `name` (e.g. `vllm:num_requests_running`,
    `slo_gateway_ttft_seconds_sum`) that carries `labels`; 0.0 when there is none."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
        if sample.name == name and labels.items() <= sample.labels.items()
    )


def info_labels(page: str, name: str) -> dict[str, str]:
    """The labels of an info-style gauge (value 1), e.g. `vllm:cache_config_info`."""
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name == name:
                return dict(sample.labels)
    raise LookupError(f"{name} is not on the page")

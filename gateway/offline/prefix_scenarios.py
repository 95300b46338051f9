"""Scenarios where prompts share prefixes: multi-turn chat sessions over shared system prompts.

Each session picks one of `system_prompts` system prompts by Zipf popularity (rank r drawn with
weight 1 / r^zipf_s), optionally a popular document (RAG: Zipf over `documents`) in its first
user message, then runs `turns` turns: each turn replays the whole conversation so far plus a
new user message, and the assistant messages it replays are the text the simulated engine
generates (`gateway.sim.wire.output_text`), so a replayed answer hits the engine's cache as it
does with vLLM. Turns are planned `think_s` apart, but both drivers run them closed loop per
session: a later turn arrives `think_s` after the previous turn's answer ended (offline
gateway/offline/session_turns.py, live loadtests/sessions.py), so a slow answer delays the rest
of its session, and a turn planned past `duration_s` is left out. Text is synthetic at 4
characters a token. The scenario's ordinary `traffic` (unique prompts, no text)
mixes in.

    sessions_slow  prefill-bound: slow-prefill engines, long growing contexts; the fleet keeps
                   up only if prefixes are reused
    sessions_fast  fast prefill, short contexts: affinity can only help a little
    sessions_rag   RAG: popular documents in the first user message, slow-prefill engines and
                   a hosted provider with prompt caching (cached input at a tenth) to spill to
"""

from __future__ import annotations

import random
from typing import Any

from pydantic import Field

from gateway.config.settings import SloClassConfig
from gateway.config.strict_model import StrictModel
from gateway.offline.scenario import (
    EngineSpec,
    ProviderSpec,
    Scenario,
    ScenarioTenant,
    Traffic,
)
from gateway.offline.trace import PlannedRequest, PromptedRequest
from gateway.offline.workload import LengthSpec, RateShape
from gateway.sim.engine import EngineServerParams
from gateway.sim.fleet import MemberPrice
from gateway.sim.provider import ProviderParams
from gateway.sim.wire import engine_prompt_tokens, output_text, prompt_text


class Sessions(StrictModel):
    tenant: str
    slo_class: str
    sessions: int = Field(ge=1)
    start_within_s: float = Field(gt=0, description="sessions start uniformly in [0, this)")
    turns: int = Field(ge=1)
    think_s: float = Field(gt=0)
    system_prompts: int = Field(default=8, ge=1)
    system_tokens: int = Field(default=1000, ge=1)
    zipf_s: float = Field(default=1.1, ge=0)
    documents: int = Field(default=0, ge=0)
    document_tokens: int = Field(default=0, ge=0)
    user: LengthSpec = LengthSpec(profile="conversation", scale=0.2, max_tokens=300)
    output: LengthSpec = LengthSpec(profile="conversation", scale=0.5, max_tokens=150)


class PrefixScenario(Scenario):
    sessions: list[Sessions] = Field(min_length=1)

    def plan(self, seed: int | None = None) -> list[PlannedRequest]:
        if self.trace is not None:
            return super().plan(seed)  # the trace replaces all planned traffic
        base = self.seed if seed is None else seed
        planned = list(super().plan(seed))
        for index, spec in enumerate(self.sessions):
            rng = random.Random(f"{base}:sessions:{index}")
            planned += session_turns(spec, self.model, self.duration_s, rng, f"{index}:")
        return sorted(planned, key=lambda r: r.arrival_s)


def session_turns(
    spec: Sessions, model: str, duration_s: float, rng: random.Random, label: str = ""
) -> list[PromptedRequest]:
    systems = [
        _text(random.Random(f"system:{i}"), spec.system_tokens) for i in range(spec.system_prompts)
    ]
    documents = [
        _text(random.Random(f"doc:{i}"), spec.document_tokens) for i in range(spec.documents)
    ]
    user, output = spec.user.sampler("prompt"), spec.output.sampler("output")
    turns: list[PromptedRequest] = []
    for number in range(spec.sessions):
        start_s = rng.uniform(0, spec.start_within_s)
        messages = [{"role": "system", "content": _zipf(rng, systems, spec.zipf_s)}]
        opening = _zipf(rng, documents, spec.zipf_s) + "\n" if documents else ""
        for turn in range(spec.turns):
            at_s = start_s + turn * spec.think_s
            messages.append({"role": "user", "content": opening + _text(rng, user.draw(rng))})
            opening = ""
            tokens = output.draw(rng)
            if at_s < duration_s:
                body = {"model": model, "messages": list(messages)}
                prompt = engine_prompt_tokens(body, "chat")
                text = prompt_text(body, "chat")
                where = (f"{label}{number}", turn, spec.think_s)
                turns.append(
                    PromptedRequest(
                        at_s, prompt, tokens, spec.tenant, spec.slo_class, body, text, *where
                    )
                )
            messages.append({"role": "assistant", "content": output_text(tokens)})
    return turns


_WORDS = [f"{a}{b}{c}" for a in "bdfgklmnprst" for b in "aeiou" for c in "nrstlm"]


def _text(rng: random.Random, tokens: int) -> str:
    """About `tokens` tokens of words at 4 characters each (3 letters and a space)."""
    return " ".join(rng.choices(_WORDS, k=max(1, tokens)))


def _zipf(rng: random.Random, items: list[str], s: float) -> str:
    weights = [1 / (rank + 1) ** s for rank in range(len(items))]
    return rng.choices(items, weights)[0]


_CLASSES = {
    "chat": SloClassConfig(ttft_ms=2500, tpot_ms=150, priority=10, sheddable=False),
    "batch": SloClassConfig(deadline_ms=120000, priority=0, sheddable=True),
}
_SLOW_PREFILL = {"prefill_per_token_s": 0.0005, "prefill_quadratic_s": 2e-8}


def _engines(count: int, **params: Any) -> list[EngineSpec]:
    return [EngineSpec(id=f"vllm-{i}", params=EngineServerParams(**params)) for i in range(count)]


def _batch(rate: float, end_s: float) -> Traffic:
    return Traffic(
        tenant="jobs",
        slo_class="batch",
        shape=RateShape.constant(rate, 0, end_s),
        prompt=LengthSpec(profile="conversation", scale=0.5, max_tokens=2048),
        output=LengthSpec(profile="conversation", scale=0.5, max_tokens=200),
    )


def _sessions_scenario(**fields: Any) -> PrefixScenario:
    """A 30 s scenario of chat sessions (tenant `app`) beside batch jobs (tenant `jobs`)."""
    tenants = {
        "app": ScenarioTenant(allowed_classes=["chat"]),
        "jobs": ScenarioTenant(allowed_classes=["batch"]),
    }
    return PrefixScenario(duration_s=30, classes=_CLASSES, tenants=tenants, **fields)


def sessions_slow() -> PrefixScenario:
    return _sessions_scenario(
        name="sessions_slow",
        description="Prefill-bound: chat sessions with long growing contexts on slow-prefill "
        "engines, shared system prompts, a little unique batch traffic.",
        drain_s=60,
        traffic=[_batch(0.5, 30)],
        engines=_engines(4, **_SLOW_PREFILL),
        sessions=[
            Sessions(
                tenant="app",
                slo_class="chat",
                # 48: closed loop per session, 32 let the fleet keep up without reuse (least_loaded
                # 94%); the scenario is the kind where it must not
                sessions=48,
                start_within_s=6,
                turns=6,
                think_s=4.5,
                system_prompts=8,
                system_tokens=1500,
            )
        ],
    )


def sessions_fast() -> PrefixScenario:
    return _sessions_scenario(
        name="sessions_fast",
        description="Fast prefill, short contexts: chat sessions where affinity can help little.",
        drain_s=30,
        traffic=[_batch(1.0, 30)],
        engines=_engines(4),
        sessions=[
            Sessions(
                tenant="app",
                slo_class="chat",
                sessions=120,
                start_within_s=12,
                turns=6,
                think_s=3,
                system_prompts=4,
                system_tokens=200,
                user=LengthSpec(profile="conversation", scale=0.05, max_tokens=80),
                output=LengthSpec(profile="conversation", scale=0.3, max_tokens=80),
            )
        ],
    )


# A hosted model priced like a mid-size one, its prompt-cache reads billed at a tenth (as
# OpenAI and Anthropic bill them); it answers fast but costs, while the engines are free.
_HOSTED = ProviderSpec(
    id="hosted",
    params=ProviderParams(ttft_median_s=0.3),
    price=MemberPrice(input_per_1m=3.0, output_per_1m=15.0, cached_input_per_1m=0.3),
)


def sessions_rag() -> PrefixScenario:
    return _sessions_scenario(
        name="sessions_rag",
        description="RAG sessions: Zipf-popular 1,500-token documents in the first user message, "
        "on 3 slow-prefill engines and a priced hosted provider with prompt caching.",
        drain_s=60,
        traffic=[_batch(0.3, 30)],
        engines=_engines(3, **_SLOW_PREFILL),
        providers=[_HOSTED],
        sessions=[
            Sessions(
                tenant="app",
                slo_class="chat",
                sessions=40,
                start_within_s=10,
                turns=3,
                think_s=6,
                system_prompts=2,
                system_tokens=300,
                documents=12,
                document_tokens=1500,
            )
        ],
    )


def sessions_rag_engines() -> PrefixScenario:
    """sessions_rag on its engines alone: what they serve at SLO, against which the hosted
    provider's spend in sessions_rag is judged (docs/slo-guide.md)."""
    full = sessions_rag()
    return full.model_copy(
        update={
            "name": "sessions_rag_engines",
            "description": "sessions_rag without its hosted provider: the engines alone.",
            "providers": [],
        }
    )

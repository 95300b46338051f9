"""The gateway's prefix index against a real vLLM's prefix cache: a multi-turn session through
the gateway, each turn's predicted cached tokens against what vLLM reports it found cached."""

from __future__ import annotations

from typing import Any, NamedTuple

import httpx
import openai
import pytest

from tests.engines.stack import EXACT_LENGTH, engine_view, sdk_client
from tests.engines.vllm_server import TEST_TIMEOUT_S
from tests.engines.workload import prompt
from tests.fixtures.gateway import ADMIN_KEY, PUBLIC_MODEL
from tests.fixtures.servers import UvicornThread

pytestmark = [pytest.mark.engine, pytest.mark.timeout(TEST_TIMEOUT_S)]
TURNS = 5
USER_TOKENS = 450  # per turn: the last turn's prompt is about 2,400 tokens, under max-model-len
ANSWER_TOKENS = 16  # short answers: the index learns an answer's blocks one turn late
TEMPLATE_TOKENS = 4  # per message: `<|role|>` and two newlines (tiny_model.py's chat template)


class Turn(NamedTuple):
    estimated: int  # the gateway's prompt-token estimate (/admin/decisions prompt_tokens)
    predicted: int  # x-slo-gateway-predicted-cached-tokens, in the estimate's tokens
    prompt_tokens: int  # vLLM's usage.prompt_tokens
    reported: int  # vLLM's usage.prompt_tokens_details.cached_tokens

    @property
    def share_in_vllm_tokens(self) -> float:
        """The predicted cached share of the prompt, in vLLM's tokens: the index's own
        prediction, free of the token estimate's error."""
        return self.predicted / self.estimated * self.prompt_tokens


def session(gateway: UvicornThread, sdk: openai.OpenAI, turns: int) -> list[Turn]:
    """A conversation replayed whole each turn (earlier user messages and vLLM's answers, then
    a new user message), as a chat client sends one; always max_tokens (random weights)."""
    messages: list[dict[str, Any]] = []
    seen = []
    for number in range(turns):
        messages.append({"role": "user", "content": prompt(USER_TOKENS, seed=900 + number)})
        raw = sdk.chat.completions.with_raw_response.create(
            model=PUBLIC_MODEL,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=ANSWER_TOKENS,
            extra_body=EXACT_LENGTH,
            extra_headers={"x-session-id": "prefix-check"},
        )
        answer = raw.parse()
        assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
        decision = decision_of(gateway, raw.headers["x-request-id"])
        predicted = int(raw.headers["x-slo-gateway-predicted-cached-tokens"])
        assert decision["predicted_cached_tokens"] == predicted
        reported = answer.usage.prompt_tokens_details.cached_tokens or 0
        counted = answer.usage.prompt_tokens
        seen.append(Turn(decision["prompt_tokens"], predicted, counted, reported))
        messages.append({"role": "assistant", "content": answer.choices[0].message.content})
    return seen


def decision_of(gateway: UvicornThread, request_id: str) -> dict[str, Any]:
    headers = {"authorization": f"Bearer {ADMIN_KEY}"}
    response = httpx.get(gateway.base_url + "/admin/decisions", headers=headers)
    response.raise_for_status()
    decisions: list[dict[str, Any]] = response.json()["decisions"]
    return next(d for d in decisions if d["request_id"] == request_id)


def test_predicted_cached_tokens_match_what_vllm_found_cached(gateway: UvicornThread) -> None:
    """From the second turn on, the index's predicted share of the prompt, in vLLM's tokens,
    is within `tolerance` of vLLM's cached count. The tolerance sums what the two count
    differently:
    - one KV block (the engine's block_size, 128 on CPU): vLLM caches and reports whole
      blocks only, so the partly filled last block of the common prefix is never a hit, while
      the index predicts up to the end of the last shared message;
    - the previous answer (ANSWER_TOKENS): vLLM cached the answer's blocks as it generated
      them, but the index learns that the answer extends the chain only when the next turn's
      hit is reported, one turn later; and random-weight text detokenised then tokenised again
      need not give the same tokens, so vLLM's match may also stop inside the answer;
    - the chat template (TEMPLATE_TOKENS a message): role tags and newlines are tokens of no
      message's characters, and the index shares the prompt out by characters.
    The raw prediction is in the gateway's estimated tokens (characters times a rate fitted to
    GPT tokenizers, not this model's), so it also carries the estimate's error, |estimated -
    vLLM's prompt tokens| times the cached share: checked separately with that added.
    """
    view = engine_view(gateway.base_url)
    assert view["prefix_caching"] is True  # vLLM 0.32's default, and --enable-prefix-caching
    block = int(view["kv_block_size_tokens"])
    with sdk_client(gateway) as sdk:
        turns = session(gateway, sdk, TURNS)
    print("per turn:", turns)  # pytest -s shows the figures the note quotes
    assert turns[0].predicted == 0, turns  # nothing routed yet holds this conversation
    for number, turn in enumerate(turns[1:], start=2):
        # vLLM found the previous turn's prompt cached, less its partly filled last block
        assert turn.reported >= turns[number - 2].prompt_tokens - block, (number, turns)
        tolerance = block + ANSWER_TOKENS + TEMPLATE_TOKENS * (2 * number - 1)
        assert abs(turn.share_in_vllm_tokens - turn.reported) <= tolerance, (number, turns)
        cached_share = turn.reported / turn.prompt_tokens
        estimate_error = abs(turn.estimated - turn.prompt_tokens) * cached_share
        assert abs(turn.predicted - turn.reported) <= tolerance + estimate_error, (number, turns)

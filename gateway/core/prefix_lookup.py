"""The prefix index as routing uses it: predicted cached tokens onto the candidates' snapshots,
and the index told where each request went and what its engine reported.

Shared by the live router and the offline gateway model, so both route with the same index.
Pure, `now` passed in. A policy then reads `RouteRequest.cached_tokens` (the prediction,
discounted by the endpoint's precision) and nothing else of the index.
"""

from __future__ import annotations

from gateway.core.prefix_chain import PrefixChain
from gateway.core.prefix_index import PrefixIndex
from policies.base import EngineSignals, RouteRequest

DEFAULT_OUTPUT_TOKENS = 256  # an answer's KV writes, when max_tokens does not bound them


def with_cached(request: RouteRequest, index: PrefixIndex, chain: PrefixChain) -> RouteRequest:
    """The request with the tokens each endpoint is predicted to hold cached (`cached_tokens`),
    over the endpoints the index knows; the same request when none holds its first block."""
    if not chain.hashes or not index.masks:
        return request
    cached = index.cached(chain, request.prompt_tokens)
    if not cached:
        return request
    r = request  # positional: about half what dataclasses.replace costs, once per request
    return RouteRequest(
        r.request_id, r.model, r.tenant, r.slo, r.prompt_tokens, r.max_tokens, r.stream, r.seq,
        r.session, cached, r.fairness_key,
    )  # fmt: skip


def routed(
    index: PrefixIndex,
    engine: EngineSignals | None,
    endpoint_id: str,
    chain: PrefixChain,
    written_tokens: float,
    now: float,
) -> None:
    """A request was sent to `endpoint_id`: fold in its engine's latest counters, then the
    request's own writes and chain."""
    if engine is not None:
        computed = None
        queries, hits = (
            engine.prefix_cache_queries_total,
            engine.prefix_cache_hits_total,
        )
        if queries is not None and hits is not None:
            computed = queries - hits
        index.scraped(endpoint_id, computed, engine.kv_capacity_tokens, now)
    if chain.hashes:
        index.routed(endpoint_id, chain, written_tokens, now)


def answered(
    index: PrefixIndex,
    endpoint_id: str,
    request: RouteRequest,
    chain: PrefixChain,
    cached: int,
    prompt: int,
    now: float,
) -> None:
    """The engine found `cached` of its `prompt` tokens (its own count) in its cache: calibrate
    the index. The prediction is in the gateway's estimated tokens, so it is first rescaled to
    the engine's count: against a real vLLM the estimate ran 25-33% high (tests/engines/
    test_vllm_prefix.py), and unscaled every exact hit read as a 20-25% miss, pulling the
    endpoint's precision down and shrinking its kappa."""
    predicted = request.cached_tokens.get(endpoint_id, 0.0)
    if request.prompt_tokens > 0 and prompt > 0:
        predicted *= prompt / request.prompt_tokens  # x 1.0 offline: the sim counts the estimate
    index.calibrate(endpoint_id, chain, predicted, cached, prompt, now)

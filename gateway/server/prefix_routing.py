"""The live router's prefix index: the wall clock and the scraper around the pure index.

Per request: its chain is hashed once (`gateway/core/prefix_chain.py`) and looked up before
admission, so the policy sees each endpoint's predicted cached tokens on the `RouteRequest`;
once an endpoint accepted it, the index records that the endpoint will hold the chain; once its
answer says how many tokens the engine found cached, the index is calibrated.
"""

from __future__ import annotations

import time
from typing import Any

from gateway.core.prefix_chain import EMPTY, PrefixChain, chain_of
from gateway.core.prefix_index import IndexParams, PrefixIndex
from gateway.core.prefix_lookup import DEFAULT_OUTPUT_TOKENS, answered, routed, with_cached
from gateway.telemetry.record import Finished
from gateway.watch.scraper import Scraper
from policies.base import RouteRequest


class PrefixRouting:
    def __init__(self, scraper: Scraper, params: IndexParams | None = None) -> None:
        self.index = PrefixIndex(params)
        self.scraper = scraper

    def annotate(
        self, request: RouteRequest, body: dict[str, Any]
    ) -> tuple[RouteRequest, PrefixChain]:
        """The request with its predicted cached tokens per endpoint, and its chain."""
        chain = chain_of(body)
        if not chain.hashes:
            return request, EMPTY
        return with_cached(request, self.index, chain), chain

    def sent(self, endpoint_id: str, request: RouteRequest, chain: PrefixChain) -> None:
        """The endpoint accepted the request: it computes the uncached part and the answer."""
        uncached = request.prompt_tokens - request.cached_tokens.get(endpoint_id, 0.0)
        written = uncached + (request.max_tokens or DEFAULT_OUTPUT_TOKENS)
        engine = self.scraper.signals(endpoint_id)
        routed(self.index, engine, endpoint_id, chain, written, time.time())

    def answered(
        self, endpoint_id: str, request: RouteRequest, chain: PrefixChain, result: Finished
    ) -> None:
        """The engine said how much of the prompt it found cached: calibrate the index."""
        if result.cached_tokens is None or not chain.hashes or result.outcome != "ok":
            return
        cached, prompt = result.cached_tokens, result.prompt_tokens
        answered(self.index, endpoint_id, request, chain, cached, prompt, time.time())

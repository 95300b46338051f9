"""`Forwarder`: a ranked request sent upstream, failing over along its ranking until an endpoint
answers (its first bytes in hand), or the rules say stop.

The first attempt runs directly (the common case, and cheaper); tenacity takes over only after
a failed attempt that allows another, with gateway/core/failover.py's rules: which failures
give up, how many attempts, and the backoff (a Retry-After wait when the ranking has no other
endpoint). A stream is committed before it counts as answered: its grammar watch has seen what
the client gets first (gateway/upstream/relay.py), within the first-byte timeout. A client
that leaves while the attempts run cancels them (`ClientGone`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type

from gateway.config.settings import EndpointConfig, ServerConfig
from gateway.core.failover import backoff_s, final_error, gives_up
from gateway.errors import AttemptFailed
from gateway.server.exchange import Exchange
from gateway.server.finisher import Finisher, body_result
from gateway.telemetry import tracing
from gateway.upstream.client import Opened, Upstream
from gateway.upstream.departure import Departure
from gateway.upstream.grammar import Facts
from gateway.upstream.relay import client_disconnected, commit
from gateway.watch.endpoints import Registry
from policies.base import Ranking, RouteRequest


class ClientGone(Exception):
    """The client disconnected before the first byte; the upstream attempt was cancelled."""


@dataclass(slots=True)
class Routed:
    opened: Opened
    ranking: Ranking
    attempts: int


class Forwarder:
    def __init__(
        self,
        server: ServerConfig,
        registry: Registry,
        upstream: Upstream,
        finisher: Finisher,
        footprint: Callable[[RouteRequest], int],
    ) -> None:
        """`footprint`: the KV tokens a request's lease counts (admission's estimate)."""
        self.server = server
        self.registry = registry
        self.upstream = upstream
        self.finisher = finisher
        self.footprint = footprint

    async def open(self, exchange: Exchange, ranking: Ranking) -> Routed:
        """Open the first endpoint that answers; give up if the client leaves first."""
        departure = Departure(lambda: client_disconnected(exchange.receive))
        try:
            with departure:
                return await self._open(exchange, ranking)
        except asyncio.CancelledError:
            if not departure.left:
                raise  # cancelled from outside (shutdown), not by the client leaving
            departure.forgive()
            raise ClientGone() from None

    def refused(self, exchange: Exchange, opened: Opened) -> None:
        """An answer the client will not get (the engine refused the prompt as too long for
        its context): recorded, with no prompt billed."""
        self.finisher.finish(
            opened, exchange.request, body_result(opened, Facts(), 0), exchange.record
        )

    async def _open(self, exchange: Exchange, ranking: Ranking) -> Routed:
        order = [self.registry.endpoints[s.endpoint_id] for s in ranking.endpoints]
        try:
            return Routed(await self._attempt(order[0], exchange), ranking, 1)
        except AttemptFailed as failure:
            if self._gives_up(order, 1, failure):
                raise final_error(failure) from None
            wait_s = self._backoff_s(order, failure)
        if wait_s > 0:
            await asyncio.sleep(wait_s)
        return await self._retry(order, exchange, ranking)

    async def _retry(
        self, order: Sequence[EndpointConfig], exchange: Exchange, ranking: Ranking
    ) -> Routed:
        """Attempts from the second on; tenacity's attempt n is the request's attempt n + 1."""
        retrying = AsyncRetrying(
            stop=self._stop(order),
            wait=self._wait(order),
            retry=retry_if_exception_type(AttemptFailed),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    number = attempt.retry_state.attempt_number + 1
                    endpoint = order[(number - 1) % len(order)]
                    return Routed(await self._attempt(endpoint, exchange), ranking, number)
        except AttemptFailed as last:
            raise final_error(last) from None
        raise AssertionError("unreachable: tenacity either returns or re-raises")

    def _stop(self, order: Sequence[EndpointConfig]) -> Callable[[RetryCallState], bool]:
        def stop(state: RetryCallState) -> bool:
            failure = state.outcome.exception() if state.outcome else None
            return self._gives_up(order, state.attempt_number + 1, failure)

        return stop

    def _wait(self, order: Sequence[EndpointConfig]) -> Callable[[RetryCallState], float]:
        def wait(state: RetryCallState) -> float:
            failure = state.outcome.exception() if state.outcome else None
            return self._backoff_s(order, failure)

        return wait

    def _gives_up(
        self, order: Sequence[EndpointConfig], made: int, failure: BaseException | None
    ) -> bool:
        return gives_up(made, failure, order[made % len(order)].id, self.server)

    def _backoff_s(self, order: Sequence[EndpointConfig], failure: BaseException | None) -> float:
        return backoff_s(len(order), failure, self.server)

    async def _attempt(self, endpoint: EndpointConfig, exchange: Exchange) -> Opened:
        request, call, record = exchange.request, exchange.call, exchange.record
        predicted = record.ranking.predicted(endpoint.id) if record.ranking else None
        self.finisher.start(endpoint.id, request, self.footprint(request), predicted)
        record.endpoint_id = endpoint.id
        record.attempts += 1
        try:
            with tracing.upstream_span(endpoint, call.path, call.model, record):
                opened = await self.upstream.open(endpoint, call)
                if call.stream and opened.status < 300:
                    public = call.model if self.server.response_model == "public" else None
                    watch = call.grammar.watch(opened.started_s, public)
                    opened = await commit(opened, watch, self.server.first_byte_timeout_s)
                return opened
        except AttemptFailed as failure:
            self.finisher.failed_attempt(endpoint.id, request, failure)
            raise
        except BaseException:
            self.finisher.abandoned(endpoint.id, request.request_id)
            raise

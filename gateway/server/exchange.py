"""`Exchange`: one request as it goes through the router, the values every step of its
lifecycle reads carried together instead of threaded through each call."""

from __future__ import annotations

from dataclasses import dataclass

from starlette.types import Receive, Send

from gateway.core.prefix_chain import EMPTY, PrefixChain
from gateway.telemetry.record import RequestRecord
from gateway.upstream.client import UpstreamCall
from policies.base import RouteRequest


@dataclass(slots=True)
class Exchange:
    """`request` and `call` are what is being served: a fallback model replaces both (the
    record keeps the model asked for). `record` collects what the request log, metrics and
    usage get; `receive` and `send` are the client's ASGI channel; `chain` is the prompt's
    prefix chain, once the pipeline annotated the request."""

    request: RouteRequest
    call: UpstreamCall
    record: RequestRecord
    receive: Receive
    send: Send
    chain: PrefixChain = EMPTY

"""The gateway in front of a real vLLM: its config, its view of the engine, an SDK client."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import openai
from openai.types.chat import ChatCompletionChunk

from tests.engines.vllm_server import SERVED_NAME, VllmServer
from tests.fixtures.gateway import (
    PUBLIC_MODEL,
    TENANT_KEY,
    admin_endpoints,
    config,
    endpoint,
    eventually,
    running_gateway,
)
from tests.fixtures.servers import UvicornThread

ENDPOINT_ID = "vllm-cpu"
KV_CACHE_TOKENS = 8192  # the session's server: a handful of 1,500-token requests fills it
EXACT_LENGTH = {"ignore_eos": True}  # random weights rarely pick EOS; this makes lengths exact


@contextlib.contextmanager
def gateway_over(
    server: VllmServer, declares: dict[str, Any] | None = None, **sections: Any
) -> Iterator[UvicornThread]:
    """A gateway in front of `server`, returned once it has scraped the engine's metrics;
    `declares`: more fields of its endpoint (e.g. priority_scheduling)."""
    models = {PUBLIC_MODEL: SERVED_NAME}
    real = endpoint(ENDPOINT_ID, server.base_url, models=models, **(declares or {}))
    with running_gateway(config([real], **sections)) as gateway:
        assert eventually(lambda: _scraped(gateway.base_url), 10), "no scrape of vLLM's /metrics"
        yield gateway


def engine_view(gateway_url: str) -> dict[str, Any]:
    """The engine signals GET /admin/endpoints shows for the vLLM endpoint ({} before a scrape)."""
    view: dict[str, Any] | None = admin_endpoints(gateway_url)[ENDPOINT_ID]["engine"]
    return view or {}


def async_sdk_client(gateway: UvicornThread) -> openai.AsyncOpenAI:
    """`sdk_client`'s async twin: many streams on one event loop."""
    base_url = gateway.base_url + "/v1"
    return openai.AsyncOpenAI(base_url=base_url, api_key=TENANT_KEY, max_retries=0, timeout=120)


def sdk_client(gateway: UvicornThread) -> openai.OpenAI:
    """The openai SDK aimed at `gateway` as the test tenant; no retries, so a 429 is seen."""
    base_url = gateway.base_url + "/v1"
    return openai.OpenAI(base_url=base_url, api_key=TENANT_KEY, max_retries=0, timeout=120)


def stream_chat(
    client: openai.OpenAI, content: str, max_tokens: int, **extra: Any
) -> openai.Stream[ChatCompletionChunk]:
    """A streamed chat of one user message and exactly `max_tokens` output tokens."""
    stream: openai.Stream[ChatCompletionChunk] = client.chat.completions.create(
        model=PUBLIC_MODEL,
        messages=[{"role": "user", "content": content}],
        max_tokens=max_tokens,
        stream=True,
        extra_body=EXACT_LENGTH,
        **extra,
    )
    return stream


def _scraped(gateway_url: str) -> bool:
    return engine_view(gateway_url).get("running") is not None

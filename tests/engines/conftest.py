"""Fixtures of the real-engine tier: one vLLM server for the tier, gateways in front of it.

The server is package-scoped: starting vLLM costs 30-100 s, so the tier shares one, and it
stops when the tier's last test ends rather than idling beside the rest of the suite. Tests
leave it idle (they wait for their requests to end) so the next test finds an empty engine.
Without the engine venv every test here skips, naming the command that builds it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.engines.stack import KV_CACHE_TOKENS, gateway_over
from tests.engines.vllm_server import (
    INSTALL_COMMAND,
    ServeParams,
    VllmServer,
    engine_venv,
    tiny_model,
)
from tests.fixtures.servers import UvicornThread


@pytest.fixture(scope="session")
def venv() -> Path:
    found = engine_venv()
    if found is None:
        pytest.skip(f"no vLLM engine venv (set SLO_VLLM_VENV or run `{INSTALL_COMMAND}`)")
    return found


@pytest.fixture(scope="session")
def model(venv: Path) -> Path:
    return tiny_model(venv)


@pytest.fixture(scope="package")
def vllm(venv: Path, model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    scratch = tmp_path_factory.mktemp("vllm")
    # Priority scheduling for test_vllm_priority.py; requests without a `priority` all get 0,
    # and equal priorities run first come, first served, as under the default policy.
    params = ServeParams(kv_cache_tokens=KV_CACHE_TOKENS, scheduling_policy="priority")
    with VllmServer(venv, model, scratch, params) as server:
        yield server


@pytest.fixture
def gateway(vllm: VllmServer) -> Iterator[UvicornThread]:
    with gateway_over(vllm) as server:
        yield server

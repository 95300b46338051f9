"""A fleet of simulated engines and providers served from one event loop.

`FleetConfig` lists the members (id, port, params, price), loadable from YAML:

    public_model: llama-3-8b
    engines:
      - {id: vllm-fast, port: 9101, params: {step_base_s: 0.015}}
    providers:
      - {id: provider-a, port: 9201, api_key_env: SIM_PROVIDER_A_KEY, params: {api_key: sk-a}}

`serve_fleet` runs one uvicorn server per member until its `stop` event is set or it is
cancelled; the caller owns signal handling, since several servers share the loop. What uvicorn
logs for a member is tagged `[sim <member id>]` (gateway/sim/log_tag.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Generator
from pathlib import Path
from typing import Any

import uvicorn
import yaml
from pydantic import Field, model_validator
from starlette.types import ASGIApp

from gateway.config.settings import Price
from gateway.config.strict_model import StrictModel
from gateway.sim.engine import EngineServerParams, create_engine_app
from gateway.sim.log_tag import serving_as, tag_uvicorn_logs
from gateway.sim.provider import ProviderParams, create_provider_app

_STARTUP_POLL_S = 0.01


# The gateway's own price model (input, output and cached-input rates per 1M tokens): the
# fleet's members are priced as the gateway config prices them, and the offline report bills
# with the same formula as live accounting.
MemberPrice = Price


class EngineMember(StrictModel):
    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    port: int = Field(ge=1, le=65535)
    params: EngineServerParams = EngineServerParams()
    price: MemberPrice = MemberPrice()


class ProviderMember(StrictModel):
    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    port: int = Field(ge=1, le=65535)
    params: ProviderParams = ProviderParams()
    price: MemberPrice = MemberPrice()
    api_key_env: str | None = None  # the env var a gateway reads this provider's key from


class FleetConfig(StrictModel):
    public_model: str = "llama-3-8b"
    engines: list[EngineMember] = Field(default_factory=list)
    providers: list[ProviderMember] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> FleetConfig:
        members = self.members()
        for attr in ("id", "port"):
            values = [getattr(m, attr) for m in members]
            dupes = sorted({v for v in values if values.count(v) > 1})
            if dupes:
                raise ValueError(f"duplicate member {attr}s: {dupes}")
        return self

    def members(self) -> list[EngineMember | ProviderMember]:
        return [*self.engines, *self.providers]

    def member(self, member_id: str) -> EngineMember | ProviderMember:
        for member in self.members():
            if member.id == member_id:
                return member
        raise KeyError(f"no fleet member {member_id!r}")


def load_fleet(path: str | Path) -> FleetConfig:
    return FleetConfig.model_validate(yaml.safe_load(Path(path).read_text()))


def base_urls(config: FleetConfig, host: str = "127.0.0.1") -> dict[str, str]:
    """Each member's OpenAI base URL (with /v1); /metrics and /sim/* live at its root."""
    return {m.id: f"http://{host}:{m.port}/v1" for m in config.members()}


def gateway_endpoints(config: FleetConfig, host: str = "127.0.0.1") -> list[dict[str, Any]]:
    """The fleet as `endpoints:` entries of the gateway config (`EndpointConfig`)."""
    urls = base_urls(config, host)
    entries: list[dict[str, Any]] = []
    for member in config.members():
        entry: dict[str, Any] = {
            "id": member.id,
            "base_url": urls[member.id],
            "models": {config.public_model: member.params.model},
            "price": member.price.model_dump(exclude_none=True),
        }
        if isinstance(member, EngineMember):
            # The engine's batch size is its concurrency: admission can then keep slots, not
            # only KV, in reserve for the classes that need them.
            entry |= {
                "kind": "vllm",
                "metrics_url": urls[member.id][: -len("/v1")] + "/metrics",
                "max_concurrency": member.params.max_num_seqs,
            }
        else:
            # The simulated provider speaks Messages as well as OpenAI's two APIs.
            entry |= {"kind": "openai", "max_concurrency": member.params.max_concurrency}
            entry |= {"apis": ["chat", "responses", "messages"]}
            entry |= {"api_key_env": member.api_key_env} if member.api_key_env else {}
        entries.append(entry)
    return entries


def api_key_environment(config: FleetConfig) -> dict[str, str]:
    """Env var -> provider key, for a gateway started next to the fleet (see api_key_env)."""
    return {m.api_key_env: m.params.api_key for m in config.providers if m.api_key_env}


def member_app(member: EngineMember | ProviderMember) -> ASGIApp:
    if isinstance(member, EngineMember):
        return create_engine_app(member.params)
    return create_provider_app(member.params)


def demo_fleet(base_port: int) -> FleetConfig:
    """Two engine replicas (one ~2x slower) and two providers of different latency and price."""
    slow = EngineServerParams(
        step_base_s=0.03,
        per_seq_s=0.0006,
        per_kv_token_s=6e-7,
        prefill_per_token_s=0.0005,
        prefill_quadratic_s=4e-8,
    )
    hosted = ProviderParams().model
    return FleetConfig(
        public_model="llama-3-8b",
        engines=[
            EngineMember(
                id="vllm-fast",
                port=base_port,
                price=MemberPrice(input_per_1m=0.05, output_per_1m=0.10),
            ),
            EngineMember(
                id="vllm-slow",
                port=base_port + 1,
                params=slow,
                price=MemberPrice(input_per_1m=0.03, output_per_1m=0.06),
            ),
        ],
        providers=[
            _demo_provider("provider-a", base_port + 2, hosted, 0.12, (0.20, 0.60)),
            _demo_provider("provider-b", base_port + 3, hosted, 0.35, (0.10, 0.30)),
        ],
    )


def _demo_provider(
    member_id: str, port: int, model: str, ttft_s: float, price: tuple[float, float]
) -> ProviderMember:
    key_env = "SIM_" + member_id.upper().replace("-", "_") + "_KEY"
    params = ProviderParams(model=model, api_key=f"sk-{member_id}", ttft_median_s=ttft_s)
    return ProviderMember(
        id=member_id,
        port=port,
        params=params,
        api_key_env=key_env,
        price=MemberPrice(input_per_1m=price[0], output_per_1m=price[1]),
    )


class _FleetServer(uvicorn.Server):
    """A uvicorn server that leaves signals alone: several of them share one loop."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _bind_all(host: str, ports: list[int]) -> list[socket.socket]:
    sockets: list[socket.socket] = []
    try:
        for port in ports:
            sockets.append(_bind(host, port))
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def server_config(app: ASGIApp) -> uvicorn.Config:
    """How every simulated server runs: quiet, lifespan on, bounded graceful shutdown."""
    return uvicorn.Config(
        app, lifespan="on", log_level="warning", access_log=False, timeout_graceful_shutdown=2
    )


async def serve_fleet(
    config: FleetConfig,
    *,
    host: str = "127.0.0.1",
    stop: asyncio.Event | None = None,
    ready: asyncio.Event | None = None,
) -> None:
    """Serve every member until `stop` is set (or the task is cancelled); `ready` once all run."""
    members = config.members()
    sockets = _bind_all(host, [m.port for m in members])
    servers = [_FleetServer(server_config(member_app(m))) for m in members]
    tag_uvicorn_logs()
    tasks = [
        asyncio.create_task(s.serve(sockets=[k]), context=serving_as(m.id))
        for s, k, m in zip(servers, sockets, members, strict=True)
    ]
    try:
        while not all(s.started for s in servers):
            _raise_if_failed(tasks)
            await asyncio.sleep(_STARTUP_POLL_S)
        if ready is not None:
            ready.set()
        await (stop or asyncio.Event()).wait()
    finally:
        for server in servers:
            server.should_exit = True
        await asyncio.gather(*tasks, return_exceptions=True)


def _raise_if_failed(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        if task.done():
            task.result()
            raise RuntimeError("a fleet server stopped during startup")

"""`slo-gateway demo`: a simulated fleet and the gateway on 127.0.0.1, in one process.

Two simulated vLLM replicas of different speed and two simulated hosted providers, all serving
the public model `llama-3-8b`, behind a gateway with in-memory state. No Redis, no provider keys.
The demo tenant has limits and a daily budget (its answers carry x-ratelimit-* headers), and an
admin key, made for each run unless one is given, opens the dashboard and the /admin views.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
from typing import Annotated, Any

import typer
import yaml

from gateway.config.settings import parse_config
from gateway.server.app import create_app
from gateway.server.serving import make_server
from gateway.sim.fleet import (
    FleetConfig,
    api_key_environment,
    demo_fleet,
    gateway_endpoints,
    serve_fleet,
)

DEMO_KEY_ENV = "SLO_GATEWAY_DEMO_KEY"
DEMO_KEY = "sk-slo-demo"
DEMO_ADMIN_KEY_ENV = "SLO_GATEWAY_DEMO_ADMIN_KEY"


def demo_config(fleet: FleetConfig, host: str = "127.0.0.1") -> dict[str, Any]:
    return {
        "endpoints": gateway_endpoints(fleet, host),
        "tenants": {
            "demo": {
                "api_key_env": DEMO_KEY_ENV,
                "allowed_classes": ["interactive", "batch"],
                "default_class": "interactive",
                "limits": {"requests_per_min": 6000, "tokens_per_min": 2_000_000},
                "budget": {"usd_per_day": 5.0, "soft_alert_fraction": 0.8},
            }
        },
        "classes": {
            "interactive": {"ttft_ms": 500, "tpot_ms": 50, "priority": 10, "sheddable": False},
            "batch": {"deadline_ms": 60000, "priority": 0, "sheddable": True},
        },
        "policy": {"name": "slo_aware"},
        "server": {"admin_key_env": DEMO_ADMIN_KEY_ENV},
    }


def register(cli: typer.Typer) -> None:
    cli.command()(demo)


def demo(
    port: Annotated[
        int, typer.Option(help="The gateway's port; the fleet takes the next four.")
    ] = 8080,
    api_key: Annotated[str, typer.Option(help="The demo tenant's API key.")] = DEMO_KEY,
    admin_key: Annotated[
        str | None,
        typer.Option(help="The admin key (dashboard, /admin views); default: a new one per run."),
    ] = None,
    print_config: Annotated[
        bool, typer.Option("--print-config", help="Print the demo's gateway config and exit.")
    ] = False,
) -> None:
    """Start a simulated fleet and the gateway on 127.0.0.1; Ctrl-C stops everything."""
    fleet = demo_fleet(port + 1)
    config = demo_config(fleet)
    if print_config:
        typer.echo("# The demo's gateway config; secrets are env-var references.")
        typer.echo(yaml.safe_dump(config, sort_keys=False))
        return
    os.environ.update(api_key_environment(fleet))
    os.environ[DEMO_KEY_ENV] = api_key
    os.environ[DEMO_ADMIN_KEY_ENV] = admin_key or f"sk-slo-admin-{secrets.token_urlsafe(12)}"
    asyncio.run(_run(fleet, config, port, api_key))


async def _run(fleet: FleetConfig, config: dict[str, Any], port: int, api_key: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    fleet_ready = asyncio.Event()
    fleet_task = asyncio.create_task(serve_fleet(fleet, stop=stop, ready=fleet_ready))
    if not await _fleet_started(fleet_task, fleet_ready, stop):
        return
    server = make_server(create_app(parse_config(config, "demo")), "127.0.0.1", port)
    gateway_task = asyncio.create_task(server.serve())
    while not server.started and not gateway_task.done():
        await asyncio.sleep(0.05)
    if server.started:
        _announce(port, api_key, fleet)
        await stop.wait()
    server.should_exit = True
    stop.set()
    await asyncio.gather(gateway_task, fleet_task)
    typer.echo("stopped")


async def _fleet_started(
    fleet_task: asyncio.Task[None], ready: asyncio.Event, stop: asyncio.Event
) -> bool:
    """Wait until the fleet serves; False if stopped first. A fleet that cannot start (a port
    taken) ends the demo with a message naming the ports rather than waiting forever."""
    waits = {asyncio.create_task(ready.wait()), asyncio.create_task(stop.wait())}
    await asyncio.wait({fleet_task, *waits}, return_when=asyncio.FIRST_COMPLETED)
    for wait in waits:
        wait.cancel()
    if fleet_task.done():
        try:
            fleet_task.result()
        except OSError as error:
            raise typer.BadParameter(
                f"the simulated fleet could not start ({error}); the demo takes --port and "
                "the next four ports: choose a --port with five free ports",
                param_hint="--port",
            ) from error
        return False
    if not ready.is_set():  # stopped (Ctrl-C) during startup: the fleet sees `stop` too
        await fleet_task
        return False
    return True


def _announce(port: int, api_key: str, fleet: FleetConfig) -> None:
    url = f"http://127.0.0.1:{port}"
    members = ", ".join(m.id for m in fleet.members())
    typer.echo(f"slo-gateway demo running at {url}  (fleet: {members})")
    typer.echo(f"API key: {api_key}")
    typer.echo("Try:")
    typer.echo(
        f"  curl -sN {url}/v1/chat/completions -H 'Authorization: Bearer {api_key}' "
        "-H 'Content-Type: application/json' "
        """-d '{"model": "llama-3-8b", "stream": true, "max_tokens": 16, """
        """"messages": [{"role": "user", "content": "Hello!"}]}'"""
    )
    typer.echo(
        f"  curl -sN {url}/v1/responses -H 'Authorization: Bearer {api_key}' "
        "-H 'Content-Type: application/json' "
        """-d '{"model": "llama-3-8b", "stream": true, "input": "Hello!"}'"""
    )
    typer.echo(
        f"  curl -sN {url}/v1/messages -H 'x-api-key: {api_key}' "
        "-H 'Content-Type: application/json' "
        """-d '{"model": "llama-3-8b", "stream": true, "max_tokens": 16, """
        """"messages": [{"role": "user", "content": "Hello!"}]}'"""
    )
    typer.echo(f"Admin key: {os.environ[DEMO_ADMIN_KEY_ENV]}")
    typer.echo(f"Dashboard: {url}/dashboard  (sign in with the admin key)")
    typer.echo(
        f"Usage:     curl -s '{url}/admin/usage?group_by=tenant,model,endpoint' "
        f"-H 'Authorization: Bearer {os.environ[DEMO_ADMIN_KEY_ENV]}'"
    )
    typer.echo(f"Metrics: {url}/metrics   Ready: {url}/readyz   Stop: Ctrl-C")

"""The `slo-gateway` command line: serve, demo, and the tools registered by their packages."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import uvicorn

from gateway.config.settings import ConfigError, GatewayConfig, Settings, load_config
from gateway.server.app import create_app
from gateway.server.http_protocol import bounded_protocol

cli = typer.Typer(
    help="slo-gateway: an OpenAI-compatible gateway that routes each request to meet its SLO.",
    no_args_is_help=True,
    add_completion=False,
)


@cli.command()
def serve(
    config: Annotated[
        Path | None, typer.Option(help="The YAML config file (or GATEWAY_CONFIG).")
    ] = None,
    host: Annotated[str | None, typer.Option(help="Bind address (or GATEWAY_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port (or GATEWAY_PORT).")] = None,
    workers: Annotated[
        int | None, typer.Option(min=1, help="Worker processes on the port (or GATEWAY_WORKERS).")
    ] = None,
) -> None:
    """Run the gateway from a config file (docs/deploy.md: workers, Redis, discovery)."""
    settings = Settings()
    path = config or settings.config
    if path is None:
        raise typer.BadParameter("pass --config FILE or set GATEWAY_CONFIG", param_hint="--config")
    try:
        gateway_config = load_config(path)
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    count = workers or settings.workers
    if count > 1:
        raise typer.Exit(_supervise(gateway_config, Path(path), settings, count, host, port))
    app = create_app(gateway_config, settings, config_path=Path(path))
    uvicorn.run(
        app,
        host=host or settings.host,
        port=port or settings.port,
        log_level=settings.log_level,
        lifespan="on",
        timeout_graceful_shutdown=gateway_config.server.drain_timeout_s,
        http=bounded_protocol(gateway_config.server),
    )


def _supervise(
    config: GatewayConfig,
    path: Path,
    settings: Settings,
    count: int,
    host: str | None,
    port: int | None,
) -> int:
    from gateway.server.workers import Supervisor

    supervisor = Supervisor(
        config, path, settings, count, host or settings.host, port or settings.port
    )
    try:
        return supervisor.run()
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        return 2


def _register_tools() -> None:
    from gateway.bench import bench_command as bench
    from gateway.offline import simulate_command as offline
    from gateway.server import control_command, demo
    from loadtests import command as live

    demo.register(cli)
    control_command.register(cli)
    bench.register(cli)
    offline.register(cli)
    live.register(cli)


def main() -> None:
    _register_tools()
    cli()


if __name__ == "__main__":
    main()

"""Run simulated servers as processes.

python -m gateway.sim engine   --port N [--params-json JSON | --fleet FILE --id ID]
python -m gateway.sim provider --port N [--params-json JSON | --fleet FILE --id ID]
python -m gateway.sim fleet    (--config FILE | --demo BASE_PORT)
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from gateway.sim.engine import EngineServerParams
from gateway.sim.fleet import (
    EngineMember,
    FleetConfig,
    ProviderMember,
    base_urls,
    demo_fleet,
    load_fleet,
    serve_fleet,
)
from gateway.sim.provider import ProviderParams


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gateway.sim")
    parser.add_argument("--host", default="127.0.0.1")
    commands = parser.add_subparsers(dest="command", required=True)
    for kind in ("engine", "provider"):
        single = commands.add_parser(kind, help=f"one simulated {kind}")
        single.add_argument("--port", type=int, help="defaults to the fleet member's port")
        single.add_argument("--params-json", help="parameters as a JSON object")
        single.add_argument("--fleet", help="a fleet YAML file to take the parameters from")
        single.add_argument("--id", help="the member of --fleet to serve")
    fleet = commands.add_parser("fleet", help="every member of a fleet")
    source = fleet.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="a fleet YAML file")
    source.add_argument("--demo", type=int, metavar="BASE_PORT", help="the demo fleet")
    return parser


def _single(args: argparse.Namespace) -> FleetConfig:
    if args.fleet:
        if not args.id:
            raise SystemExit("--fleet needs --id")
        member = load_fleet(args.fleet).member(args.id)
        port = args.port or member.port
        return _fleet_of(member.model_copy(update={"port": port}))
    if not args.port:
        raise SystemExit("--port is required without --fleet")
    raw = args.params_json or "{}"
    if args.command == "engine":
        params = EngineServerParams.model_validate_json(raw)
        return FleetConfig(engines=[EngineMember(id="engine", port=args.port, params=params)])
    provider = ProviderParams.model_validate_json(raw)
    return FleetConfig(providers=[ProviderMember(id="provider", port=args.port, params=provider)])


def _fleet_of(member: EngineMember | ProviderMember) -> FleetConfig:
    if isinstance(member, EngineMember):
        return FleetConfig(engines=[member])
    return FleetConfig(providers=[member])


async def _serve(config: FleetConfig, host: str) -> None:
    stop, ready = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    serving = asyncio.create_task(serve_fleet(config, host=host, stop=stop, ready=ready))
    started = asyncio.create_task(ready.wait())
    await asyncio.wait({serving, started}, return_when=asyncio.FIRST_COMPLETED)
    started.cancel()
    if ready.is_set():
        for member_id, url in base_urls(config, host).items():
            print(f"{member_id} {url}", flush=True)
    await serving


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "fleet":
        config = demo_fleet(args.demo) if args.demo is not None else load_fleet(args.config)
    else:
        config = _single(args)
    asyncio.run(_serve(config, args.host))
    return 0


if __name__ == "__main__":
    sys.exit(main())

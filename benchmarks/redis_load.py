"""Commands a gateway sends Redis: idle, and while serving.

One `serve` process (one worker) over Redis in front of two simulated engines: Redis's own
count of the commands it ran (`INFO commandstats`, every client's) over `--idle-s` seconds with
no traffic, then over `--requests` sequential non-streamed chat requests. Idle, what is left is
the shared view's refresh (every `state.refresh_s`, 0.1 s) and the health probes; the refresh
reads, per endpoint, its lease count, its health, the two newest latency buckets and the fast
window (older buckets are read once: gateway/state/redis_store.py, `read`). Nothing else may
use that Redis meanwhile.

    .venv/bin/python -m benchmarks.redis_load [--idle-s 5] [--requests 100]

Redis: REDIS_URL, else 127.0.0.1:6379, else a throwaway server (tests/fixtures/redis.py).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import httpx
import redis

from tests.fixtures.gateway import TENANT_KEY, chat_body, engine, fleet_config
from tests.fixtures.processes import GatewayProcess
from tests.fixtures.redis import running_redis_url


def commands_run(client: redis.Redis) -> int:
    """How many commands the server has run since it started."""
    return sum(stats["calls"] for stats in client.info("commandstats").values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle-s", type=float, default=5.0)
    parser.add_argument("--requests", type=int, default=100)
    args = parser.parse_args()
    with running_redis_url() as url:
        client = redis.Redis.from_url(url)
        fleet = {f"e{i}": engine(seed=i) for i in range(2)}
        with (
            fleet_config(fleet, policy={"name": "slo_aware"}) as (data, _),
            GatewayProcess(
                data, Path(tempfile.mkdtemp()), GATEWAY_REDIS_URL=url, GATEWAY_WORKERS="1"
            ) as gateway,
        ):
            time.sleep(3.0)  # started: its first refreshes and probes done
            before, started = commands_run(client), time.monotonic()
            time.sleep(args.idle_s)
            idle = (commands_run(client) - before) / (time.monotonic() - started)
            auth = {"authorization": f"Bearer {TENANT_KEY}"}
            before, started = commands_run(client), time.monotonic()
            with httpx.Client(timeout=30) as http:
                for _ in range(args.requests):
                    answer = http.post(
                        gateway.base_url + "/v1/chat/completions",
                        json=chat_body(max_tokens=4),
                        headers=auth,
                    )
                    answer.raise_for_status()
            took = time.monotonic() - started
            served = commands_run(client) - before
        client.close()
    print(f"idle: {idle:.0f} commands/s")
    print(
        f"{args.requests} sequential requests in {took:.1f} s ({args.requests / took:.1f}/s): "
        f"{served / took:.0f} commands/s, {served / args.requests:.1f} per request "
        "(the refresh included)"
    )


if __name__ == "__main__":
    main()
